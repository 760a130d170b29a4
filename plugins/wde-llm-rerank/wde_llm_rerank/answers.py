"""What every LLM reranker shares, whatever its decoder: the variant matchers' names (``names_of``, ``name_match``),
the answer tokens' ids (``answer_token_ids``), the settings an answer at the last token needs
(``require_answer_at_last_token``) and ``AnswerRows``, the model mixin keeping only the answer tokens' rows of the
language-model head."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from torch import nn

ANSWERS = ("yes", "no")


def config_name_or_path(path) -> str:
    """``config.json``'s ``_name_or_path`` as written (the name the checkpoint was saved under), or ``""``."""
    config_file = Path(path) / "config.json"
    if not config_file.is_file():
        return ""
    with open(config_file, encoding="utf-8") as f:
        return str(json.load(f).get("_name_or_path") or "")


def names_of(directory) -> list[str]:
    """The model's id, its path and the ``_name_or_path`` of its ``config.json``: what variant matchers read."""
    return [str(directory.name), str(directory.path), config_name_or_path(directory.path)]


def name_match(directory, fragment: str, kind: str) -> str | None:
    """A variant matcher's reason, ``"{kind} ('{fragment}' in '{name}')"``, when one of :func:`names_of` holds
    ``fragment`` (any case); else ``None``."""
    for name in names_of(directory):
        if fragment in name.lower():
            return f"{kind} ({fragment!r} in {name!r})"
    return None


def answer_token_ids(path) -> list[int]:
    """The ids of the single tokens "yes" and "no" in the model's tokenizer; ``ValueError`` if either is missing."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path)
    ids = []
    for answer in ANSWERS:
        token_id = tokenizer.convert_tokens_to_ids(answer)
        if token_id is None or token_id == tokenizer.unk_token_id:
            raise ValueError(f"model at {path}: the tokenizer has no single token {answer!r}, which an LLM "
                             "yes/no reranker scores")
        ids.append(int(token_id))
    return ids


def require_answer_at_last_token(propose, answers: str) -> None:
    """What every LLM reranker needs, refusing engine arguments that ask otherwise: causal attention, the last
    token pooled (where the model answers), no normalization."""
    propose.require("causal", True, "an LLM reranker reads its prompt as the language model does")
    propose.require("pooling", "last", f"last token: the position where the model answers {answers}")
    propose.require("normalize", False, "a reranker's answer logits are scores, not vectors to normalize")
    propose.notes["shared_prefix"] = ("pairs of one query hold their prompt's common leading tokens once per batch "
                                      "(engine argument share_prefix=False: every pair whole)")


class AnswerRows:
    """Mixin for an LLM reranker model: its language-model head (or the tied embeddings) is cut at load to the
    rows of the answer tokens, ``settings.extras["answer_token_ids"]``; ``answer_logits`` computes only those."""

    def init_answer_rows(self, config, settings, *, tied_by_default: bool) -> None:
        """Call from ``__init__`` after the base model's: the ids, and the full head when it is not tied."""
        self.answer_ids = list(settings.extras["answer_token_ids"])
        self.tied = bool(getattr(config, "tie_word_embeddings", tied_by_default))
        if not self.tied:  # the full head is read, then cut to its rows in after_load_weights
            self.lm_head = nn.Parameter(torch.empty(config.vocab_size, config.hidden_size))
        self.answer_rows = None

    @property
    def pipeline_tied(self) -> tuple[str, ...]:
        """Under pipeline parallelism the last stage reads the tied embeddings while loading, to cut the answer rows."""
        return ("embed_tokens",) if self.tied else ()

    def after_load_weights(self) -> None:
        """The base model's buffers, then keep only the answer rows of the head (tied: of the embeddings)."""
        super().after_load_weights()
        source = self.embed_tokens.weight if self.tied else self.lm_head
        self.answer_rows = nn.Parameter(source.detach()[self.answer_ids].clone(), requires_grad=False)
        if not self.tied:
            del self.lm_head

    def answer_logits(self, pooled: torch.Tensor) -> torch.Tensor:
        """``[B, answers]``: the answer tokens' logits at each sequence's pooled (last) token."""
        return pooled @ self.answer_rows.T

    def map_checkpoint_name(self, name: str):
        """The base model's names, and ``lm_head.weight`` when the head is not tied to the embeddings."""
        if name == "lm_head.weight" and not self.tied:
            return "lm_head", None
        return super().map_checkpoint_name(name)
