"""Random-weight HF models saved with a tiny tokenizer (and sentence-transformers files), never from a hub."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from wde_plugin_kit.st_files import write_st_files
from wde_plugin_kit.tokenizer_builders import bpe_tokenizer, wordpiece_tokenizer

TOKENIZERS = {"wordpiece": wordpiece_tokenizer, "bpe": bpe_tokenizer}


def save_random_model(directory, config, *, model_class: Any = None, seed: int = 0, tokenizer: str | None = "wordpiece",
                      st: dict | None = None) -> Path:
    """Save ``model_class(config)`` (default ``AutoModel.from_config``) with random weights, a tiny tokenizer
    and, when ``st`` is a dict, sentence-transformers files (``write_st_files(directory, **st)``)."""
    import torch
    from transformers import AutoModel

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    if tokenizer is not None:
        if tokenizer not in TOKENIZERS:
            raise ValueError(f"tokenizer={tokenizer!r}: expected one of {', '.join(TOKENIZERS)} or None")
        size = TOKENIZERS[tokenizer](directory, model_max_length=getattr(config, "max_position_embeddings", 512))
        config.vocab_size = max(getattr(config, "vocab_size", 0) or 0, size)
    architectures = list(getattr(config, "architectures", None) or [])
    torch.manual_seed(seed)
    model = model_class(config) if model_class is not None else AutoModel.from_config(config)
    model.eval().save_pretrained(str(directory), safe_serialization=True)
    if architectures:
        _set_architectures(directory / "config.json", architectures)
    if isinstance(st, dict):
        write_st_files(directory, **st)
    return directory


def _set_architectures(config_file: Path, architectures: list[str]) -> None:
    """Put back the ``architectures`` the caller chose (``save_pretrained`` writes the class name)."""
    config = json.loads(config_file.read_text(encoding="utf-8"))
    if config.get("architectures") != architectures:
        config["architectures"] = architectures
        config_file.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")
