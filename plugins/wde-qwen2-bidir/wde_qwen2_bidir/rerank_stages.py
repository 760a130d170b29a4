"""Stages of the ``llm-rerank`` workflow: pairs in, Qwen3-Reranker's chat prompt as tokens, one score out."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from wde_core.plugin_api import EngineArgs, HFTokenizer, Request, ScoreOptions
from wde_qwen2_bidir.prompts import QWEN3_RERANK_TASK, RERANK_PREFIX, RERANK_SUFFIX, qwen3_rerank_body


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
        raise TypeError(f"input {index}: expected a (query, document) pair, got {type(item).__name__}")
    for field, value in zip(("query", "document"), item):
        if not isinstance(value, str):
            raise TypeError(f"input {index}: field {field!r} must be a str, got {type(value).__name__}")
    return item[0], item[1]


class Qwen3RerankTokenizer(HFTokenizer):
    """Prefix tokens + the pair's ``<Instruct>/<Query>/<Document>`` tokens + suffix tokens, as the model
    card builds them (the middle cut at its end to fit ``max_model_len`` when truncating)."""

    def __init__(self, pipeline) -> None:
        super().__init__(pipeline)
        self.pipeline = pipeline
        self.instruction = getattr(pipeline.args, "instruction", None) or QWEN3_RERANK_TASK
        self.prefix = self.tokenizer(RERANK_PREFIX, add_special_tokens=False)["input_ids"]
        self.suffix = self.tokenizer(RERANK_SUFFIX, add_special_tokens=False)["input_ids"]
        self.room = self.max_len - len(self.prefix) - len(self.suffix)
        if self.room < 1:
            raise ValueError(f"max_model_len={self.max_len} leaves no room for a pair within the reranker's prompt")

    def tokenize(self, requests: list[Request], *, truncate: bool | str = True) -> None:
        """Fill token ids; ``truncate=False`` refuses a pair longer than ``max_model_len``."""
        bodies = [qwen3_rerank_body(r.text[0], r.text[1], self.instruction) for r in requests]
        encoded = self.tokenizer(bodies, add_special_tokens=False, truncation=truncate is True,
                                 max_length=self.room if truncate is True else None, return_attention_mask=False,
                                 verbose=False)["input_ids"]
        for request, ids in zip(requests, encoded):
            request.token_ids = self.prefix + list(ids) + self.suffix
            if truncate is False and request.num_tokens > self.max_len:
                raise ValueError(f"input {request.index}: the formatted pair has {request.num_tokens} tokens, more "
                                 f"than max_model_len={self.max_len}; shorten it or pass truncate=True")
        mark_shared_prefixes(requests, self.pipeline)


class YesNoScoreOutputProcessor:
    """One float per pair: sigmoid(logit("yes") - logit("no")), or that difference with ``raw_scores``."""

    def __init__(self, pipeline) -> None:
        pass

    def process(self, requests: list[Request], pooled: dict) -> list[float]:
        """Scores in batch order."""
        return [float(pooled["logits" if r.options.raw_scores else "scores"][i][0]) for i, r in enumerate(requests)]
