"""Shared-prefix reranking with an LLM reranker: one query's instruction + query (~200 tokens) before each of 100
short documents, scored by wde with the prefix shared, by wde without sharing (``share_prefix=False``), and by
sentence-transformers' CrossEncoder on the same weights converted as the Qwen3-Reranker "seq-cls" models are
(``Qwen3ForSequenceClassification``, its one row = the LM head's "yes" row - "no" row; pairs as their cards lay
them out). Alternating rounds; prints pair tokens/s medians (tokens of the whole prompts) and the ratios.

Usage: python benchmarks/bench_llm_rerank.py [--docs 100] [--prefix-tokens 200] [--layers 6] [--rounds 3]
The model is random, with Qwen3-Reranker-0.6B's widths (hidden 1024, 16 heads, 8 key/value heads of 128,
MLP 3072) and ``--layers`` layers (the model has 28: the ratios do not depend on the depth), and the tests' small
byte-level BPE tokenizer (``wde_plugin_kit.decoders.save_random_reranker``).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import torch

from common import load_corpus, measure, parser, timed


QWEN3_06B = dict(hidden_size=1024, num_attention_heads=16, num_key_value_heads=8, head_dim=128,
                 intermediate_size=3072, max_position_embeddings=1024)
PREFIX = ("<|im_start|>system\nJudge whether the Document meets the requirements based on the Query and the Instruct "
          "provided. Note that the answer can only be \"yes\" or \"no\".<|im_end|>\n<|im_start|>user\n")
SUFFIX = "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"


def save_models(root: Path, layers: int) -> tuple[Path, Path]:
    """The random reranker (``Qwen3ForCausalLM``) and its CrossEncoder conversion (``Qwen3ForSequenceClassification``)."""
    from transformers import AutoTokenizer, Qwen3ForCausalLM, Qwen3ForSequenceClassification

    from wde_plugin_kit.decoders import save_random_reranker

    causal = save_random_reranker(root / "Qwen3-Reranker-bench", tied=False, seed=0, num_hidden_layers=layers,
                                  **QWEN3_06B)
    tokenizer = AutoTokenizer.from_pretrained(causal)
    lm = Qwen3ForCausalLM.from_pretrained(causal, dtype=torch.float32)
    yes, no = (tokenizer.convert_tokens_to_ids(t) for t in ("yes", "no"))
    config = lm.config
    config.num_labels, config.pad_token_id, config.architectures = 1, tokenizer.pad_token_id, None
    classifier = Qwen3ForSequenceClassification(config)
    classifier.model.load_state_dict(lm.model.state_dict())
    with torch.no_grad():
        classifier.score.weight.copy_(lm.lm_head.weight[yes] - lm.lm_head.weight[no])
    seq_cls = root / "Qwen3-Reranker-bench-seq-cls"
    classifier.save_pretrained(seq_cls)
    tokenizer.save_pretrained(seq_cls)
    return causal, seq_cls


def query_and_documents(tokenizer, prefix_tokens: int, docs: int) -> tuple[str, str, list[str]]:
    """An instruction and a query that make the prompt's shared part about ``prefix_tokens`` tokens, and ``docs``
    documents of about 40 tokens (the start of wiki paragraphs)."""
    paragraphs = load_corpus(docs + 1)
    words = paragraphs[0].split()
    instruction, query = "Given a question about history, find the passages that answer it", ""
    while len(tokenizer(PREFIX + f"<Instruct>: {instruction}\n<Query>: {query}\n<Document>:")["input_ids"]) < \
            prefix_tokens and words:
        query += words.pop(0) + " "
    documents = [tokenizer.decode(tokenizer(p)["input_ids"][:40]) for p in paragraphs[1:]]
    return instruction, query.strip(), documents


def main() -> None:
    options = parser(__doc__)
    options.add_argument("--docs", type=int, default=100)
    options.add_argument("--prefix-tokens", type=int, default=200)
    options.add_argument("--layers", type=int, default=6)
    options.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    options.add_argument("--st-batch-size", type=int, default=32)
    args = options.parse_args()
    torch.set_num_threads(args.threads)

    from sentence_transformers import CrossEncoder
    from transformers import AutoTokenizer

    from wde_core import Engine

    with tempfile.TemporaryDirectory() as tmp:
        causal, seq_cls = save_models(Path(tmp), args.layers)
        instruction, query, documents = query_and_documents(AutoTokenizer.from_pretrained(causal),
                                                            args.prefix_tokens, args.docs)
        common = dict(task="rerank", device="cpu", dtype=args.dtype, num_threads=args.threads, instruction=instruction)
        shared, plain = Engine(str(causal), **common), Engine(str(causal), share_prefix=False, **common)
        dtype = getattr(torch, args.dtype)
        reference = CrossEncoder(str(seq_cls), device="cpu", model_kwargs={"dtype": dtype})
        pairs = [(PREFIX + f"<Instruct>: {instruction}\n<Query>: {query}\n", f"<Document>: {d}{SUFFIX}")
                 for d in documents]
        run(shared, plain, reference, query, documents, pairs, args)


def run(shared, plain, reference, query, documents, pairs, args) -> None:
    """Alternate the three over the same documents; print the medians, ratios and score differences."""
    requests = shared.prepare("score", [(query, d) for d in documents], truncate=True).requests
    tokens, lengths = sum(r.num_tokens for r in requests), [r.num_tokens for r in requests]
    print(f"{len(documents)} documents against one query: {tokens} prompt tokens ({min(lengths)}-{max(lengths)} a "
          f"pair); backend {shared.pipeline.components['attention_backend'].name}; {args.layers} layers; "
          f"threads {torch.get_num_threads()}; {args.dtype}")
    score = {"wde shared prefix": lambda: np.array([r["score"] for r in sorted(shared.rerank(query, documents),
                                                                                 key=lambda r: r["index"])]),
             "wde unshared": lambda: np.array([r["score"] for r in sorted(plain.rerank(query, documents),
                                                                          key=lambda r: r["index"])]),
             "CrossEncoder": lambda: reference.predict(pairs, batch_size=args.st_batch_size)}
    for fn in score.values():
        fn()  # warm-up
    medians, outputs = measure({name: timed(fn) for name, fn in score.items()}, args.rounds, tokens)
    for peer in ("wde unshared", "CrossEncoder"):
        print(f"ratio wde shared prefix / {peer}: {medians['wde shared prefix'] / medians[peer]:.2f}x "
              f"({medians['wde shared prefix']:.0f} / {medians[peer]:.0f} tokens/s)")
    same = np.abs(outputs["wde shared prefix"] - outputs["wde unshared"]).max()
    peer = np.abs(outputs["wde shared prefix"] - outputs["CrossEncoder"]).max()
    print(f"max abs score difference: shared vs unshared {same:.2e}; vs CrossEncoder {peer:.2e} (its pairs are "
          f"tokenized in two halves, so a token at the seam may differ)")


if __name__ == "__main__":
    main()
