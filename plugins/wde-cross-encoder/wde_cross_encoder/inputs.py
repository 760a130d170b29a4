"""Input processor of cross-encoders: ``(query, document)`` pairs for rerank; texts or pairs for classify."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from wde_core.plugin_api import InputTypeError, Request, ScoreOptions


class CrossEncoderInputProcessor:
    """Validates pairs (and, for classify, single texts) before any work; names the bad item and field."""

    def __init__(self, pipeline) -> None:
        self.pairs_only = pipeline.task == "rerank"

    def process(self, inputs: Any, *, options: ScoreOptions | None = None, prompt: str | None = None,
                prompt_name: str | None = None) -> list[Request]:
        """One request per pair (``text`` is the ``(query, document)`` tuple) or per text."""
        if prompt is not None or prompt_name is not None:
            raise ValueError("cross-encoders take no prompt; put any instruction into the query")
        options = options or ScoreOptions()
        if isinstance(inputs, (str, tuple)) and not self.pairs_only:
            inputs = [inputs]
        if isinstance(inputs, (str, bytes, dict)) or not isinstance(inputs, Sequence):
            expected = "a list of (query, document) pairs" if self.pairs_only else "a str or a list of str or pairs"
            raise TypeError(f"inputs: expected {expected}, got {type(inputs).__name__}")
        if len(inputs) == 0:
            raise ValueError("inputs: got an empty list; pass at least one item")
        return [Request(i, self.check_item(i, item), options) for i, item in enumerate(inputs)]

    def check_item(self, index: int, item: Any) -> str | tuple[str, str]:
        """Return the item as a str or a ``(str, str)`` tuple, or raise naming its field."""
        if isinstance(item, str) and not self.pairs_only:
            return item
        if not isinstance(item, (tuple, list)) or len(item) != 2:
            raise InputTypeError(index, f"expected a (query, document) pair, got {type(item).__name__}"
                            + (f" of length {len(item)}" if isinstance(item, (tuple, list)) else ""))
        for field, value in zip(("query", "document"), item):
            if not isinstance(value, str):
                raise InputTypeError(index, f"field {field!r} must be a str, got {type(value).__name__}")
        return item[0], item[1]
