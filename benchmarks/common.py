"""What the benchmark scripts share: the corpus, the common options, and alternating timed rounds."""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "data" / "wiki-paragraphs.jsonl"


def load_corpus(n: int, corpus: str | Path = CORPUS) -> list[str]:
    """The first ``n`` wiki paragraphs (of ``corpus``, a JSON-lines file with a ``text`` field)."""
    with open(corpus, encoding="utf-8") as f:
        return [json.loads(line)["text"] for _, line in zip(range(n), f)]


TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json")


def save_bge_base_shape(directory: Path, tokenizer_dir: str | None = None, pooling: str = "cls") -> Path:
    """A random-weight ``BertModel`` with bge-base's shape (hidden 768, 12 layers, 12 heads), normalized
    ``pooling`` and a BERT WordPiece tokenizer copied from ``tokenizer_dir`` (else the kit's generated one)."""
    import shutil

    from transformers import BertConfig, BertModel

    from wde_plugin_kit import save_random_model

    config = BertConfig(vocab_size=30522, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                        intermediate_size=3072, max_position_embeddings=512)
    st = dict(pooling=pooling, normalize=True, max_seq_length=512)
    save_random_model(directory, config, model_class=BertModel, tokenizer=None if tokenizer_dir else "wordpiece", st=st)
    for name in TOKENIZER_FILES if tokenizer_dir else ():
        shutil.copy(Path(tokenizer_dir) / name, Path(directory) / name)
    return Path(directory)


def parser(doc: str | None) -> argparse.ArgumentParser:
    """An argument parser with the options every benchmark takes: ``--rounds`` and ``--threads``."""
    parser = argparse.ArgumentParser(description=doc)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    return parser


def timed(fn: Callable[[], Any]) -> Callable[[], tuple[float, Any]]:
    """A runner for :func:`measure`: calls ``fn`` and returns ``(seconds, output)``."""
    def run() -> tuple[float, Any]:
        start = time.perf_counter()
        out = fn()
        return time.perf_counter() - start, out

    return run


def measure(runners: dict[str, Callable[[], tuple[float, Any]]], rounds: int, tokens: int,
            speeds: dict[str, list[float]] | None = None, unit: str = "tokens") -> tuple[dict[str, float], dict[str, Any]]:
    """Run every runner once per round, alternating; return median ``tokens``/s (``unit``: what they count) and the
    last outputs (each round's rate into ``speeds`` when given, for per-round ratios)."""
    speeds = {} if speeds is None else speeds
    speeds.update({name: [] for name in runners})
    outputs: dict[str, Any] = {}
    width = max(len(name) for name in runners) + 1
    for r in range(rounds):
        for name, run in runners.items():
            seconds, outputs[name] = run()
            speeds[name].append(tokens / seconds)
            print(f"  round {r + 1} {name:<{width}} {tokens / seconds:10.2f} {unit}/s  ({seconds:.2f} s)", flush=True)
    return {name: statistics.median(v) for name, v in speeds.items()}, outputs


def print_ratio(medians: dict[str, float], ours: str, peer: str) -> None:
    """Print both medians and the ratio ``ours / peer``."""
    print(f"median tokens/s: {ours} {medians[ours]:.0f}, {peer} {medians[peer]:.0f}")
    print(f"ratio {ours} / {peer}: {medians[ours] / medians[peer]:.2f}x")


def inputs_of(tokenizer, paragraphs: list[str], tokens: int, n: int) -> list[str]:
    """``n`` texts of exactly ``tokens`` tokens (special tokens included), cut from consecutive paragraphs."""
    words = tokenizer(" ".join(paragraphs), add_special_tokens=False)["input_ids"]
    step = tokens - 2
    pieces = [words[i:i + step] for i in range(0, len(words) - step, step)]
    texts = tokenizer.batch_decode(pieces[:n])
    return [text for text in texts if len(tokenizer(text)["input_ids"]) == tokens] or texts


def null_forward(engine, hidden: int) -> None:
    """Make the engine's worker return zero pooled vectors of the batch's shape instead of running the model (rows of
    one preallocated tensor: a fresh ``torch.zeros`` per batch enters an OpenMP region, milliseconds on a busy host,
    which is the model's time, not the host path's). It replaces ``launch``, which ``execute`` calls too, on the
    worker instance: ``del engine.executor.worker.launch`` gives the model back."""
    import torch

    zeros = torch.zeros(engine.pipeline.args.max_num_seqs, hidden)
    engine.executor.worker.launch = lambda model_input: (lambda: {"dense": zeros[:model_input.num_seqs]})
