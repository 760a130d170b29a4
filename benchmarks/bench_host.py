"""The host path with a null forward: everything wde does around the model (input checks, tokenization, scheduling,
batch building, pooled outputs finished and collected) against the raw batch tokenization of the same tokenizer on
the same cores, alternating rounds (issue 29: the engine must run at >= 80% of the raw rate).

Usage: python benchmarks/bench_host.py [--n 4000] [--rounds 5] [--threads 2] [--chunk 512]
A bge-base-shaped BERT (hidden 768) with all-MiniLM-L6-v2's tokenizer (bert-base-uncased's WordPiece vocabulary, as
bge-base's) whose worker returns zero vectors of the batch's shape instead of running the model. Inputs of 50 and
512 tokens are cut from the wiki paragraphs. Runners:
  raw     the model's Rust tokenizer on the whole list, as one batch, and the ids as Python lists
          (``backend_tokenizer.encode_batch(texts)``: no engine does less to tokenize)
  encode  ``Engine.encode(texts)``: one call, tokenized whole before its first batch
  map     ``Engine.map("encode", chunks)``: the pipelined host path, the next chunks tokenized while the
          current ones run
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import torch

from common import inputs_of, load_corpus, measure, null_forward, parser, save_bge_base_shape, timed


def main() -> None:
    options = parser(__doc__)
    options.add_argument("--n", type=int, default=4000, help="50-token inputs (a tenth as many 512-token ones)")
    options.add_argument("--chunk", type=int, default=512, help="texts per Engine.map chunk")
    args = options.parse_args()
    torch.set_num_threads(args.threads)
    from wde_core import Engine
    from wde_plugin_kit.corpus import minilm_path

    cores = len(os.sched_getaffinity(0))
    directory = save_bge_base_shape(Path(tempfile.mkdtemp(prefix="bge-base-shape-")), str(minilm_path()))
    engine = Engine(str(directory), device="cpu", num_threads=args.threads)
    null_forward(engine, 768)
    tokenizer = engine.tokenizer.tokenizer
    paragraphs = load_corpus(6000)
    print(f"{cores} cores, torch threads {args.threads}, tokenizers parallelism "
          f"{os.environ.get('TOKENIZERS_PARALLELISM', 'default (on)')}; null forward, bge-base shape")
    for length, n in ((50, args.n), (512, args.n // 10)):
        texts = inputs_of(tokenizer, paragraphs, length, n)
        tokens = sum(len(ids) for ids in tokenizer(texts, truncation=True)["input_ids"])
        chunks = [texts[i:i + args.chunk] for i in range(0, len(texts), args.chunk)]
        print(f"\n{length}-token inputs: {len(texts)} texts, {tokens} tokens")
        backend = tokenizer.backend_tokenizer
        runners = {"raw": timed(lambda: [encoding.ids for encoding in backend.encode_batch(texts)]),
                   "encode": timed(lambda: engine.encode(texts)),
                   "map": timed(lambda: [v for chunk in engine.map("encode", chunks) for v in chunk])}
        medians, _ = measure(runners, args.rounds, tokens)
        for name, rate in medians.items():
            print(f"  {name:7} {rate:10.0f} tokens/s  {rate / cores:10.0f} tokens/s per core"
                  + ("" if name == "raw" else f"  {rate / medians['raw']:.2f}x raw tokenization"))
        batches = -(-tokens // engine.pipeline.args.max_num_batched_tokens)
        host_ms = 1e3 * tokens / medians["map"] / batches
        print(f"  host path per {engine.pipeline.args.max_num_batched_tokens}-token batch (map): {host_ms:.1f} ms")


if __name__ == "__main__":
    main()
