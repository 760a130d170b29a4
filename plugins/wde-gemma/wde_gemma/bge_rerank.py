"""bge-reranker-v2-gemma (``GemmaForCausalLM``) as an LLM reranker: the pair laid out as FlagEmbedding's
``FlagLLMReranker`` does, score = sigmoid(logit("Yes")) at the last token, from one LM-head row only.

Recognised by the ``bge-reranker-v2-gemma`` variant (that name in the model's id, path or ``_name_or_path``);
``variant="bge-reranker-v2-gemma"`` forces it for a renamed directory.
"""

from __future__ import annotations

import torch

from wde_core.plugin_api import HFTokenizer, InputValueError, Request
from wde_gemma.model import GemmaEmbedder
from wde_llm_rerank.public import AnswerRows, mark_shared_prefixes, name_match, require_answer_at_last_token

# FlagEmbedding's defaults: query "A: {query}", passage "B: {passage}", then this prompt after a newline
PROMPT = ("Given a query A and a passage B, determine whether the passage contains an answer to the query by "
          "providing a prediction of either 'Yes' or 'No'.")
SEP, QUERY, PASSAGE = "\n", "A: {}", "B: {}"


def is_bge_gemma_reranker(directory) -> str | None:
    """The variant's matcher: a reason when the model id, path or ``_name_or_path`` names bge-reranker-v2-gemma."""
    return name_match(directory, "bge-reranker-v2-gemma", "LLM Yes reranker")


def configure_bge_gemma(propose, directory, args) -> None:
    """Causal attention, last-token pooling, sigmoid, and the id of "Yes" (``extras``)."""
    from transformers import AutoTokenizer

    require_answer_at_last_token(propose, "Yes or No")
    tokenizer = AutoTokenizer.from_pretrained(directory.path)
    ids = propose.extras["answer_token_ids"] = [tokenizer("Yes", add_special_tokens=False)["input_ids"][0]]
    propose.require("activation", "sigmoid", f"sigmoid(logit('Yes')) at the last token (token id {ids[0]}), "
                                             "FlagLLMReranker's score with normalize=True")


class GemmaYesReranker(AnswerRows, GemmaEmbedder):
    """The Gemma decoder plus a one-row head: the language-model head's (or tied embeddings') "Yes" row."""

    takes_padding_rows = True  # the core's CPU row padding (ModelInput.padding), dropped by the trunk's forward

    def __init__(self, config, attention, settings=None) -> None:
        super().__init__(config, attention, settings)
        self.init_answer_rows(config, settings, tied_by_default=True)

    def head(self, pooled: torch.Tensor) -> torch.Tensor:
        """``[B, 1]``: logit("Yes") of each sequence's last token."""
        return self.answer_logits(pooled)


class BgeGemmaRerankTokenizer(HFTokenizer):
    """BOS (when it is not the pad token) + "A: query" + newline + "B: passage", then newline + prompt, each part
    tokenized alone as FlagLLMReranker does; the engine argument ``instruction`` replaces the prompt. When
    truncating, the query part keeps at most 3/4 of the room left by the prompt, the passage the rest."""

    def __init__(self, pipeline) -> None:
        super().__init__(pipeline)
        self.pipeline = pipeline
        tok = self.tokenizer
        self.bos = [tok.bos_token_id] if tok.bos_token_id is not None and tok.bos_token_id != tok.pad_token_id else []
        self.sep = self._ids(SEP)
        self.tail = self.sep + self._ids(getattr(pipeline.args, "instruction", None) or PROMPT)
        self.room = self.max_len - len(self.tail)
        if self.room < len(self.bos) + len(self.sep) + 2:
            raise ValueError(f"max_model_len={self.max_len} leaves no room for a pair within the reranker's prompt")

    def _ids(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def tokenize(self, requests: list[Request], *, truncate: bool | str = True) -> None:
        """Fill token ids; ``truncate=False`` refuses a pair longer than ``max_model_len``."""
        queries = self._batch([QUERY.format(r.text[0]) for r in requests])
        passages = self._batch([PASSAGE.format(r.text[1]) for r in requests])
        for request, query, passage in zip(requests, queries, passages):
            query = self.bos + query
            if truncate is True:
                query = query[: self.room * 3 // 4]
                passage = passage[: self.room - len(query) - len(self.sep)]
            request.token_ids = query + self.sep + passage + self.tail
            if truncate is False and request.num_tokens > self.max_len:
                raise InputValueError(request.index, f"the formatted pair has {request.num_tokens} tokens, more "
                                 f"than max_model_len={self.max_len}; shorten it or pass truncate=True")
        mark_shared_prefixes(requests, self.pipeline)

    def _batch(self, texts: list[str]) -> list[list[int]]:
        return self.tokenizer(texts, add_special_tokens=False, return_attention_mask=False, verbose=False)["input_ids"]
