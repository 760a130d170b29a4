"""int8 against the model's dtype by batch size: where small batches should leave int8 (wde_cpu_kernels.int8's
``float_below_rows``). all-MiniLM-L6-v2 (the packaged real weights), batches of 16-token texts cut from the wiki
paragraphs, one process, 2 threads; the engines alternate round after round, each encoding the batch ``--repeats``
times per round; medians, and the speed over the float engine.

Usage: python benchmarks/bench_int8_rows.py [--texts 1,2,4,6,7,8,16,32] [--dtype float32] [--rounds 5]
Engines:
  int8         ``quantization="int8"`` as shipped (below ``float_below_rows()`` rows each layer runs in the dtype)
  int8 always  the same engine's layers made to run int8 at every size (their ``float_below`` set to 0)
  float        the model's dtype, unquantized
On a CPU without an int8 dot product (AVX2 only: AMD Zen 3) ``float_below_rows()`` is 112, the rows at which
``int8 always`` first ran faster than ``float`` there; on one that splits 256-bit vectors in halves (AMD Zen 1, where
``int8 always`` never caught up: 0.28x at 16 rows, 0.5x at 240-448, 0.93x at 912) every batch; elsewhere 0. Run it on
a CPU with AVX512-VNNI or AMX to see whether small batches should leave int8 there too.
"""

from __future__ import annotations

import statistics
import time

import numpy as np
import torch

from common import inputs_of, load_corpus, parser


def int8_at_every_size(engine) -> int:
    """Make every int8 layer of ``engine`` run int8 whatever the batch; return how many layers changed."""
    kernels = [m.kernel for m in engine.executor.worker.model.modules() if hasattr(getattr(m, "kernel", None),
                                                                                     "float_below")]
    for kernel in kernels:
        kernel.float_below = 0
    return len(kernels)


def median_seconds(engine, texts: list[str], repeats: int) -> float:
    """The median of ``repeats`` encodes of ``texts``."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        engine.encode(texts)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def min_cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(((a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)).min())


def main() -> None:
    options = parser(__doc__)
    options.set_defaults(rounds=5)
    options.add_argument("--texts", default="1,2,4,6,7,8,16,32", help="batch sizes, in texts of --tokens tokens")
    options.add_argument("--tokens", type=int, default=16)
    options.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    options.add_argument("--repeats", type=int, default=10, help="encodes per engine per round")
    args = options.parse_args()
    torch.set_num_threads(args.threads)
    from wde_core import Engine
    from wde_plugin_kit.corpus import minilm_path
    from wde_cpu_kernels import int8

    model = str(minilm_path())
    engines = {"int8": Engine(model, dtype=args.dtype, num_threads=args.threads, quantization="int8"),
               "int8 always": Engine(model, dtype=args.dtype, num_threads=args.threads, quantization="int8"),
               "float": Engine(model, dtype=args.dtype, num_threads=args.threads)}
    changed = int8_at_every_size(engines["int8 always"])
    shipped = int8.float_rows_note(args.dtype)[2:] or "int8 at every batch size"
    print(f"all-MiniLM-L6-v2, {args.dtype} around int8, {args.threads} threads; as shipped here: {shipped} (int8 dot "
          f"product: {int8.int8_dot_product()}); {changed} int8 layers")
    paragraphs = load_corpus(400)
    tokenizer = engines["float"].tokenizer.tokenizer
    for n in (int(value) for value in args.texts.split(",")):
        texts = inputs_of(tokenizer, paragraphs, args.tokens, n)[:n]
        rows = sum(len(ids) for ids in tokenizer(texts)["input_ids"])
        reference = engines["float"].encode(texts)
        cosines = {name: min_cosine(engine.encode(texts), reference) for name, engine in engines.items()}
        seconds: dict[str, list[float]] = {name: [] for name in engines}
        for _ in range(args.rounds):
            for name, engine in engines.items():
                seconds[name].append(median_seconds(engine, texts, args.repeats))
        medians = {name: statistics.median(values) for name, values in seconds.items()}
        print(f"{rows:5d} rows ({len(texts)} texts): " + ", ".join(
            f"{name} {1e3 * medians[name]:.2f} ms ({medians['float'] / medians[name]:.2f}x float, "
            f"cos {cosines[name]:.4f})" for name in engines), flush=True)


if __name__ == "__main__":
    main()
