"""Qwen3-Reranker as an LLM yes/no reranker: pairs in its model card's chat prompt, the decoder, then only the "yes"
and "no" rows of the language-model head at the last token of each sequence (wde-llm-rerank's ``AnswerRows``);
score = sigmoid(logit(yes) - logit(no)).

Recognised by the ``qwen3-reranker`` variant of ``Qwen3ForCausalLM`` (the model's name, path or
``_name_or_path``) and forced by the engine argument ``task="rerank"``.
"""

from __future__ import annotations

import torch

from wde_core.plugin_api import HFTokenizer, InputValueError, Request
from wde_llm_rerank.public import (AnswerRows, answer_token_ids, mark_shared_prefixes, name_match,
                                    require_answer_at_last_token)
from wde_qwen2_bidir.model import DecoderEmbedder
from wde_qwen2_bidir.prompts import QWEN3_RERANK_TASK, RERANK_PREFIX, RERANK_SUFFIX, qwen3_rerank_body

KNOWN_RERANKERS = ("qwen3-reranker",)


def is_qwen3_reranker(directory) -> str | None:
    """The variant's matcher: a reason when the model id, path or ``_name_or_path`` names a Qwen3-Reranker."""
    for fragment in KNOWN_RERANKERS:
        why = name_match(directory, fragment, "LLM yes/no reranker")
        if why is not None:
            return why
    return None


def configure_rerank(propose, directory, args) -> None:
    """Causal attention, last-token pooling, sigmoid, and the yes/no token ids (in ``extras``)."""
    from wde_core.plugin_api import rope_type

    rope_type(directory.config)
    require_answer_at_last_token(propose, "yes or no")
    ids = propose.extras["answer_token_ids"] = answer_token_ids(directory.path)
    propose.require("activation", "sigmoid", f"sigmoid(logit('yes') - logit('no')) at the last token (token ids "
                                             f"{ids}), as Qwen3-Reranker's model card scores")


class Qwen3YesNoReranker(AnswerRows, DecoderEmbedder):
    """The decoder plus a two-row head: the language-model head's "yes" and "no" rows (mxbai-rerank-v2: "1", "0")."""

    takes_padding_rows = True  # the core's CPU row padding (ModelInput.padding), dropped by the trunk's forward

    def __init__(self, config, attention, settings=None) -> None:
        super().__init__(config, attention, settings)
        self.init_answer_rows(config, settings, tied_by_default=False)

    def head(self, pooled: torch.Tensor) -> torch.Tensor:
        """``[B, 1]``: logit("yes") - logit("no") of each sequence's last token."""
        logits = self.answer_logits(pooled)
        return logits[:, :1] - logits[:, 1:]


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
                raise InputValueError(request.index, f"the formatted pair has {request.num_tokens} tokens, more "
                                 f"than max_model_len={self.max_len}; shorten it or pass truncate=True")
        mark_shared_prefixes(requests, self.pipeline)
