"""wde against sentence-transformers: same model, same corpus, same process, alternating runs.

Usage: python benchmarks/bench_encode.py [--n 2000] [--rounds 3] [--threads 2] [--model DIR]
Prints tokens/s of each engine (median over rounds) and the ratio wde / sentence-transformers.
"""

from __future__ import annotations

import numpy as np
import torch

from common import load_corpus, measure, parser, print_ratio, timed


def main() -> None:
    options = parser(__doc__)
    options.add_argument("--n", type=int, default=2000)
    options.add_argument("--model", default=None, help="a model directory (default: the packaged all-MiniLM-L6-v2)")
    options.add_argument("--st-batch-size", type=int, default=32)
    args = options.parse_args()
    torch.set_num_threads(args.threads)

    from sentence_transformers import SentenceTransformer

    from wde_core import Engine

    engine = Engine(args.model, dtype="float32", device="cpu", num_threads=args.threads)
    run(engine, SentenceTransformer(str(engine.pipeline.model.path), device="cpu"), load_corpus(args.n), args)


def run(engine, reference, texts, args) -> None:
    """Alternate wde ``encode`` and ``SentenceTransformer.encode`` over ``texts``; print the medians, the ratio
    and the smallest cosine between the two."""
    path = str(engine.pipeline.model.path)
    max_len = engine.pipeline.settings.max_model_len
    tokens = sum(len(ids) for ids in engine.tokenizer.tokenizer(texts, truncation=True, max_length=max_len)["input_ids"])
    print(f"model {engine.pipeline.model.name} ({path})")
    print(f"corpus: {len(texts)} wiki paragraphs, {tokens} tokens after truncation at {max_len}; "
          f"threads {torch.get_num_threads()}; fp32; attention {engine.pipeline.components['attention_backend'].name}")

    engine.encode(texts[:64]), reference.encode(texts[:64])  # warm-up
    medians, outputs = measure({"wde": timed(lambda: engine.encode(texts)), "sentence-transformers": timed(
        lambda: reference.encode(texts, batch_size=args.st_batch_size))}, args.rounds, tokens)
    a, b = outputs["wde"], outputs["sentence-transformers"]
    cosine = (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    print_ratio(medians, "wde", "sentence-transformers")
    print(f"min cosine wde vs sentence-transformers: {cosine.min():.7f}")


if __name__ == "__main__":
    main()
