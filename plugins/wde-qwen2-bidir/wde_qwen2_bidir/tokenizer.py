"""Tokenizer stage for decoder embedders: EOS appended when ``tokenizer_config.json`` asks for it.

gte-Qwen2 and Llama tokenizer configs set ``add_eos_token: true``, but not every fast tokenizer
honours it (gte-Qwen2 relied on its own remote tokenizer code). Last-token pooling then reads the
EOS state the model was trained to summarize, so it is appended here when the tokenizer does not.
"""

from __future__ import annotations

import json
from pathlib import Path

from wde_core.plugin_api import HFTokenizer, Request


def asks_for_eos(path: Path) -> bool:
    """Whether the model directory's ``tokenizer_config.json`` sets ``add_eos_token: true``."""
    config_file = Path(path) / "tokenizer_config.json"
    if not config_file.is_file():
        return False
    with open(config_file, encoding="utf-8") as f:
        return json.load(f).get("add_eos_token") is True


class EosAppendingTokenizer(HFTokenizer):
    """The core's fast tokenizer; appends EOS (keeping room for it when truncating) if asked to."""

    def __init__(self, pipeline) -> None:
        super().__init__(pipeline)
        self.eos_id = self.tokenizer.eos_token_id
        self.append_eos = asks_for_eos(pipeline.model.path) and not self._appends_eos_itself()
        if self.append_eos and self.eos_id is None:
            raise ValueError(f"model {pipeline.model.name!r}: tokenizer_config.json asks for an EOS token "
                             "but the tokenizer has no eos_token")

    def tokenize(self, requests: list[Request], *, truncate: bool | str = True) -> None:
        """Fill each request's token ids, EOS last when appended; ``truncate=False`` refuses long inputs."""
        if not self.append_eos:
            super().tokenize(requests, truncate=truncate)
            return
        encoded = self.tokenizer(
            [r.text for r in requests],
            add_special_tokens=True,
            truncation=truncate is True,
            max_length=self.max_len - 1 if truncate is True else None,  # room for the EOS
            return_attention_mask=False,
            verbose=False,
        )
        for request, ids in zip(requests, encoded["input_ids"]):
            request.token_ids = list(ids) + [self.eos_id]
        if truncate is False:
            self.check_lengths(requests)
        if not self.include_prompt:
            self.set_prompt_lengths(requests)

    def _appends_eos_itself(self) -> bool:
        """Whether the tokenizer's own special tokens already end a text with EOS."""
        full = self.tokenizer("a", add_special_tokens=True)["input_ids"]
        plain = self.tokenizer("a", add_special_tokens=False)["input_ids"]
        return self.eos_id is not None and len(full) > len(plain) and full[-1] == self.eos_id
