"""The stages every LLM reranker's workflow shares (its tokenizer is the model's own): the ``llm-rerank`` engine
arguments, ``(query, document)`` pairs in (``llm-pairs``), the shared-prefix marking a pair tokenizer ends with, and
one yes/no score per pair out (``yes-no-score``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from wde_core.plugin_api import EngineArgs, InputTypeError, Request, ScoreOptions


@dataclass
class LlmRerankEngineArgs(EngineArgs):
    """The core's arguments plus ``instruction``, the task put into every pair's prompt, and ``share_prefix``:
    pairs of one query in a batch compute their common leading tokens (instruction and query) once."""

    instruction: str | None = None
    share_prefix: bool = True

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.instruction is not None and not isinstance(self.instruction, str):
            raise ValueError(f"engine argument instruction={self.instruction!r}: expected a str or None")
        if not isinstance(self.share_prefix, bool):
            raise ValueError(f"engine argument share_prefix={self.share_prefix!r}: expected True or False")


def mark_shared_prefixes(requests: list[Request], pipeline) -> None:
    """Mark pairs of the same query as sharing their prompt's leading tokens (``Request.shared_prefix``) unless the
    engine argument ``share_prefix=False``: the batch builder then holds those tokens once (causal models only)."""
    if getattr(pipeline.args, "share_prefix", True):
        for request in requests:
            request.shared_prefix = request.text[0]


class PairInputProcessor:
    """Validates ``(query, document)`` pairs before any work, naming the bad item and field."""

    def __init__(self, pipeline) -> None:
        pass

    def process(self, inputs: Any, *, options: ScoreOptions | None = None, prompt: str | None = None,
                prompt_name: str | None = None) -> list[Request]:
        """One request per pair; ``text`` is the ``(query, document)`` tuple."""
        if prompt is not None or prompt_name is not None:
            raise ValueError("an LLM reranker takes no prompt; pass the engine argument instruction=")
        if isinstance(inputs, (str, bytes, dict)) or not isinstance(inputs, Sequence):
            raise TypeError(f"inputs: expected a list of (query, document) pairs, got {type(inputs).__name__}")
        if len(inputs) == 0:
            raise ValueError("inputs: got an empty list; pass at least one item")
        return [Request(i, check_pair(i, item), options or ScoreOptions()) for i, item in enumerate(inputs)]


def check_pair(index: int, item: Any) -> tuple[str, str]:
    """The item as a ``(str, str)`` tuple, or raise naming its field."""
    if not isinstance(item, (tuple, list)) or len(item) != 2:
        raise InputTypeError(index, f"expected a (query, document) pair, got {type(item).__name__}")
    for field, value in zip(("query", "document"), item):
        if not isinstance(value, str):
            raise InputTypeError(index, f"field {field!r} must be a str, got {type(value).__name__}")
    return item[0], item[1]


class YesNoScoreOutputProcessor:
    """One float per pair: sigmoid(logit("yes") - logit("no")), or that difference with ``raw_scores``."""

    def __init__(self, pipeline) -> None:
        pass

    def process(self, requests: list[Request], pooled: dict) -> list[float]:
        """Scores in batch order."""
        return [float(pooled["logits" if r.options.raw_scores else "scores"][i][0]) for i, r in enumerate(requests)]
