"""Runs inside an OpenVINO virtualenv (sentence-transformers[openvino], optimum-intel, nncf, datasets), driven by
bench_cpu.py over stdin/stdout as vllm_runner.py is: sentence-transformers' OpenVINO backend at its default
precision, or statically quantized to int8 the way ``export_static_quantized_openvino_model`` does it (optimum-intel's
OVQuantizer, ``OVQuantizationConfig(num_samples=300)``, inputs padded to 384), calibrated on the first 300 texts of
the benchmark's own corpus instead of GLUE/SST-2 (no dataset hub here).

Protocol: argv = MODEL_DIR MODE(default|int8) CORPUS N MAX_LEN WORKDIR THREADS; then for each line "run" on stdin it
embeds the corpus once and answers "@@" + {"seconds": s, "embeddings": [...]}; anything else ends it.
"""

import json
import shutil
import sys
import time
from pathlib import Path

CALIBRATION_TEXTS = 300


def quantized_copy(model_dir: str, texts: list[str], workdir: Path) -> tuple[str, str]:
    """A copy of the model directory with a static int8 OpenVINO model under ``openvino_int8/`` (made once per
    ``workdir``), and that model's file name relative to the copy."""
    from datasets import Dataset
    from optimum.intel import OVConfig, OVQuantizationConfig, OVQuantizer
    from sentence_transformers import SentenceTransformer

    copy = workdir / "model"
    if not list((copy / "openvino_int8").rglob("openvino_model.xml")):
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(model_dir, copy)
        model = SentenceTransformer(str(copy), device="cpu", backend="openvino")
        encoded = model.tokenizer(texts[:CALIBRATION_TEXTS], padding="max_length", max_length=384, truncation=True)
        calibration = Dataset.from_dict(dict(encoded))
        quantizer = OVQuantizer.from_pretrained(model.transformers_model)
        config = OVConfig(quantization_config=OVQuantizationConfig(num_samples=CALIBRATION_TEXTS))
        quantizer.quantize(calibration, save_directory=str(copy / "openvino_int8"), ov_config=config)
    saved = next((copy / "openvino_int8").rglob("openvino_model.xml"))  # optimum-intel adds a subfolder
    return str(copy), str(saved.relative_to(copy))


def main() -> None:
    model_dir, mode, corpus, n, max_len, workdir, threads = sys.argv[1:8]
    import torch
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(int(threads))
    with open(corpus, encoding="utf-8") as f:
        texts = [json.loads(line)["text"] for _, line in zip(range(int(n)), f)]
    config = {"INFERENCE_NUM_THREADS": int(threads)}
    if mode == "int8":
        path, file_name = quantized_copy(model_dir, texts, Path(workdir))
        model = SentenceTransformer(path, device="cpu", backend="openvino",
                                    model_kwargs={"file_name": file_name, "ov_config": config})
    else:
        model = SentenceTransformer(model_dir, device="cpu", backend="openvino", model_kwargs={"ov_config": config})
    model.max_seq_length = int(max_len)
    model.encode(texts[:32], batch_size=32)
    print("@@" + json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        if line.strip() != "run":
            break
        start = time.perf_counter()
        vectors = model.encode(texts, batch_size=32)
        seconds = time.perf_counter() - start
        print("@@" + json.dumps({"seconds": seconds, "embeddings": vectors.tolist()}), flush=True)


if __name__ == "__main__":
    main()
