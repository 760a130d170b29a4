"""wde against sentence-transformers: same model, same corpus, same process, alternating runs.

Usage: python benchmarks/bench_encode.py [--n 2000] [--rounds 3] [--threads 2] [--model DIR]
Prints tokens/s of each engine (median over rounds) and the ratio wde / sentence-transformers.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np
import torch

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "data" / "wiki-paragraphs.jsonl"


def load_corpus(n: int) -> list[str]:
    with open(CORPUS, encoding="utf-8") as f:
        return [json.loads(line)["text"] for _, line in zip(range(n), f)]


def timed(fn) -> tuple[float, np.ndarray]:
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--model", default=None, help="model directory (default: the packaged all-MiniLM-L6-v2)")
    parser.add_argument("--st-batch-size", type=int, default=32)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    from sentence_transformers import SentenceTransformer

    from wde_core import Engine

    engine = Engine(args.model, dtype="float32", device="cpu", num_threads=args.threads)
    path = str(engine.pipeline.model.path)
    reference = SentenceTransformer(path, device="cpu")
    texts = load_corpus(args.n)
    max_len = engine.pipeline.settings.max_model_len
    tokens = sum(len(ids) for ids in engine.tokenizer.tokenizer(texts, truncation=True, max_length=max_len)["input_ids"])
    print(f"model {engine.pipeline.model.name} ({path})")
    print(f"corpus: {len(texts)} wiki paragraphs, {tokens} tokens after truncation at {max_len}; "
          f"threads {torch.get_num_threads()}; fp32; attention {engine.pipeline.components['attention_backend'].name}")

    runs = {"wde": [], "sentence-transformers": []}
    engine.encode(texts[:64]), reference.encode(texts[:64])  # warm-up
    outputs = {}
    for r in range(args.rounds):
        for name, fn in (("wde", lambda: engine.encode(texts)),
                         ("sentence-transformers", lambda: reference.encode(texts, batch_size=args.st_batch_size))):
            seconds, outputs[name] = timed(fn)
            runs[name].append(tokens / seconds)
            print(f"  round {r + 1} {name:<22} {tokens / seconds:10.0f} tokens/s  ({seconds:.2f} s)")
    a, b = outputs["wde"], outputs["sentence-transformers"]
    cosine = (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    med = {name: statistics.median(v) for name, v in runs.items()}
    print(f"median tokens/s: wde {med['wde']:.0f}, sentence-transformers {med['sentence-transformers']:.0f}")
    print(f"ratio wde / sentence-transformers: {med['wde'] / med['sentence-transformers']:.2f}x")
    print(f"min cosine wde vs sentence-transformers: {cosine.min():.7f}")


if __name__ == "__main__":
    main()
