"""Pipeline parallelism on one CPU: the ``pipeline_parallel`` executor (2 stages, 1 thread each) against ``sync``
with 1 thread and with 2 threads, on a deep random decoder (Qwen2-shaped, 24 layers by default) and a steady stream
of wiki paragraphs cut into many batches (``--pp-batch-tokens``), alternating round after round.

Efficiency per process = PP=2 tokens/s / (2 x sync tokens/s with 1 thread): 1.0 when two stages do the work of two
independent one-thread processes; the micro-batches keep both stages busy when it is near 1. The bubble fraction is
the share of the stages' time not spent computing: 1 - (sum of the stages' compute seconds) / (2 x wall seconds).
Both depend on two cores being free for the two stages; the CPU seconds each engine spends per round (this
process and the stage processes, from /proc) do not: the work PP adds, whatever the load.

Usage: python benchmarks/bench_pp.py [--pp-n 128] [--pp-layers 24] [--pp-hidden 512] [--pp-batch-tokens 1024]
       [--rounds 3]   (also run by bench_cpu.py: its --pipeline-parallel option)
"""

from __future__ import annotations

import os
import statistics
import tempfile
from pathlib import Path

import numpy as np

from common import load_corpus, measure, parser, timed


def add_options(options) -> None:
    """The options of this group (bench_cpu.py takes them too)."""
    options.add_argument("--pp-n", type=int, default=128, help="paragraphs per round")
    options.add_argument("--pp-layers", type=int, default=24, help="decoder layers")
    options.add_argument("--pp-hidden", type=int, default=512, help="decoder hidden size (intermediate: 3x)")
    options.add_argument("--pp-batch-tokens", type=int, default=1024, help="max_num_batched_tokens: the micro-batch")


def save_deep_decoder(directory: Path, layers: int, hidden: int) -> Path:
    """A random Qwen2-shaped decoder (GQA: hidden/32 heads, a quarter of them key/value heads) with the tiny BPE."""
    from wde_plugin_kit.decoders import save_random_decoder

    heads = max(hidden // 32, 4)
    return save_random_decoder(directory, "qwen2", seed=0, num_hidden_layers=layers, hidden_size=hidden,
                               num_attention_heads=heads, num_key_value_heads=heads // 4,
                               intermediate_size=3 * hidden, max_position_embeddings=512)


def cpu_seconds(pids: list[int]) -> float:
    """CPU seconds (user + system) used so far by this process and the processes ``pids`` (Linux /proc)."""
    own = os.times()
    total = own.user + own.system
    for pid in pids:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def resident_mib(pid: int) -> float:
    """Resident memory of process ``pid`` in MiB (Linux /proc)."""
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024


def counting_runner(engine, texts, threads: int, cpu: list[float], bubbles: list[float] | None = None):
    """A :func:`measure` runner that records each round's CPU seconds (this process and the engine's stage processes)
    and, for a pipeline engine, its bubble fraction; ``threads``: this process's torch threads (a process-wide
    setting, which every engine sets only when it is built)."""
    import torch

    pids = [p.process.pid for p in getattr(engine.executor, "processes", [])]

    def run():
        torch.set_num_threads(threads)
        busy_before, cpu_before = sum(getattr(engine.executor, "busy_seconds", list)()), cpu_seconds(pids)
        seconds, out = timed(lambda: engine.encode(texts))()
        cpu.append(cpu_seconds(pids) - cpu_before)
        if bubbles is not None:
            busy = sum(engine.executor.busy_seconds()) - busy_before
            bubbles.append(1 - busy / (len(pids) * seconds))
        return seconds, out

    return run


def run_pipeline_group(args) -> dict[str, float]:
    """Build the model and the three engines, run alternating rounds, print medians, ratios and the bubble."""
    import torch

    from wde_core import Engine

    directory = save_deep_decoder(Path(tempfile.mkdtemp(prefix="wde-bench-pp-")), args.pp_layers, args.pp_hidden)
    texts = load_corpus(args.pp_n)
    common = dict(device="cpu", dtype="float32", max_num_batched_tokens=args.pp_batch_tokens, max_model_len=256)
    engines = {"sync 1 thread": Engine(str(directory), **common, num_threads=1),
               "sync 2 threads": Engine(str(directory), **common, num_threads=2),
               "pipeline_parallel 2x1 thread": Engine(str(directory), **common, num_threads=1,
                                                      executor="pipeline_parallel", pipeline_parallel_size=2)}
    tokens = sum(r.num_tokens for r in engines["sync 1 thread"].prepare("encode", texts).requests)
    pp = engines["pipeline_parallel 2x1 thread"]
    print(f"-- pipeline_parallel: random Qwen2-shaped decoder, {args.pp_layers} layers, hidden {args.pp_hidden}; "
          f"{len(texts)} paragraphs, {tokens} tokens, batches of <= {args.pp_batch_tokens} tokens; "
          f"{pp.pipeline.reasons['pipeline_parallel']}", flush=True)
    for engine in engines.values():
        torch.set_num_threads(engine.pipeline.args.num_threads)
        engine.encode(texts[:16])
    bubbles: list[float] = []
    cpu: dict[str, list[float]] = {name: [] for name in engines}
    runners = {name: counting_runner(engine, texts, engine.pipeline.args.num_threads, cpu[name],
                                     bubbles if engine is pp else None) for name, engine in engines.items()}
    rounds: dict[str, list[float]] = {}
    medians, outputs = measure(runners, args.rounds, tokens, rounds)
    report(medians, rounds, outputs, bubbles)
    print("CPU seconds per round (median; this process and the stage processes): " + ", ".join(
        f"{name} {statistics.median(seconds):.1f}" for name, seconds in cpu.items()) + "; PP / sync 1 thread: "
        f"{statistics.median(cpu['pipeline_parallel 2x1 thread']) / statistics.median(cpu['sync 1 thread']):.2f}x")
    print("resident memory of the stage processes: " + " | ".join(
        f"{resident_mib(p.process.pid):.0f}" for p in pp.executor.processes) + " MiB (each its own torch runtime)")
    for engine in engines.values():
        engine.close()
    return medians


def report(medians: dict, rounds: dict, outputs: dict, bubbles: list[float]) -> None:
    """Medians, per-round ratios (alternating rounds) and the efficiency per process."""
    pp, one, two = "pipeline_parallel 2x1 thread", "sync 1 thread", "sync 2 threads"
    for name, speed in medians.items():
        print(f"{name:<30}{speed:>10.0f} tokens/s (median)")
    efficiency = [a / (2 * b) for a, b in zip(rounds[pp], rounds[one])]
    versus_two = [a / b for a, b in zip(rounds[pp], rounds[two])]
    print(f"efficiency per process, PP=2 / (2 x sync 1 thread): {statistics.median(efficiency):.2f} (rounds: "
          f"{', '.join(f'{e:.2f}' for e in efficiency)}; target >= 0.85)")
    print(f"PP=2 (2 processes x 1 thread) / sync 2 threads: {statistics.median(versus_two):.2f}x (rounds: "
          f"{', '.join(f'{r:.2f}' for r in versus_two)})")
    print(f"bubble fraction of the stages: {statistics.median(bubbles):.3f} (rounds: "
          f"{', '.join(f'{b:.3f}' for b in bubbles)})")
    print(f"max abs difference PP vs sync 1 thread: {np.abs(outputs[pp] - outputs[one]).max():.2e}")


def main() -> None:
    options = parser(__doc__)
    add_options(options)
    run_pipeline_group(options.parse_args())


if __name__ == "__main__":
    main()
