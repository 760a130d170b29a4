"""wde against sentence-transformers on a CUDA GPU: a bge-base-shaped random BERT, alternating rounds.

Usage: python benchmarks/bench_gpu.py [--n 2000] [--rounds 3] [--dtype float16] [--corpus FILE] [--tokenizer DIR]
Saves a random-weight BERT with bge-base's shape (hidden 768, 12 layers, 12 heads, CLS pooling, normalized),
then prints tokens/s of wde and sentence-transformers in the same dtype, their ratio and the smallest cosine.
``--tokenizer`` copies a BERT WordPiece tokenizer from a directory (default: the kit's generated vocabulary).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import torch

from common import CORPUS, load_corpus, measure, parser, print_ratio, save_bge_base_shape, timed


def main() -> None:
    options = parser(__doc__)
    options.add_argument("--n", type=int, default=2000)
    options.add_argument("--dtype", default="float16", choices=["float16", "bfloat16", "float32"])
    options.add_argument("--corpus", default=str(CORPUS))
    options.add_argument("--tokenizer", default=None)
    options.add_argument("--device", default="cuda")
    options.add_argument("--st-batch-size", type=int, default=128)
    args = options.parse_args()
    from sentence_transformers import SentenceTransformer

    from wde_core import Engine

    texts = load_corpus(args.n, args.corpus)
    directory = save_bge_base_shape(Path(tempfile.mkdtemp(prefix="bge-base-shape-")), args.tokenizer)
    engine = Engine(str(directory), dtype=args.dtype, device=args.device)
    reference = SentenceTransformer(str(directory), device=args.device).to(getattr(torch, args.dtype))
    tokens = sum(len(ids) for ids in engine.tokenizer.tokenizer(texts, truncation=True, max_length=512)["input_ids"])
    backend = engine.pipeline.components["attention_backend"].name
    name = torch.cuda.get_device_name() if args.device == "cuda" else args.device
    print(f"{name}; {len(texts)} paragraphs, {tokens} tokens; {args.dtype}; attention {backend}")
    engine.encode(texts), reference.encode(texts, batch_size=args.st_batch_size)  # warm-up: kernels, allocator
    medians, outputs = measure({"wde": timed(lambda: engine.encode(texts)), "sentence-transformers": timed(
        lambda: reference.encode(texts, batch_size=args.st_batch_size))}, args.rounds, tokens)
    a, b = (np.asarray(outputs[k], dtype=np.float32) for k in ("wde", "sentence-transformers"))
    cosine = (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    print_ratio(medians, "wde", "sentence-transformers")
    print(f"min cosine wde vs sentence-transformers: {cosine.min():.6f}")


if __name__ == "__main__":
    main()
