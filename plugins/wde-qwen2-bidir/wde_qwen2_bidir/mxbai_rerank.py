"""mxbai-rerank-v2 (``Qwen2ForCausalLM``) as an LLM reranker: the pair laid out as the mxbai-rerank package
does, score = sigmoid(logit("1") - logit("0")) at the last token, from the two LM-head rows only.

Recognised by the ``mxbai-rerank-v2`` variant (``mxbai-rerank`` in the model's name, path or
``_name_or_path``) and chosen with ``task="rerank"``; the model class is the Qwen3-Reranker's.
"""

from __future__ import annotations

from wde_core.plugin_api import HFTokenizer, InputValueError, Request
from wde_llm_rerank.public import mark_shared_prefixes, name_match, require_answer_at_last_token
from wde_qwen2_bidir import prompts as p


def is_mxbai_reranker(directory) -> str | None:
    """The variant's matcher: a reason when the model id, path or ``_name_or_path`` names mxbai-rerank(-v2)."""
    return name_match(directory, "mxbai-rerank", "LLM 1/0 reranker")


def configure_mxbai(propose, directory, args) -> None:
    """Causal attention, last-token pooling, sigmoid, and the ids of "1" and "0" (``extras``)."""
    from transformers import AutoTokenizer

    from wde_core.plugin_api import rope_type

    rope_type(directory.config)
    require_answer_at_last_token(propose, "1 or 0")
    tokenizer = AutoTokenizer.from_pretrained(directory.path)
    ids = propose.extras["answer_token_ids"] = [tokenizer(a, add_special_tokens=False)["input_ids"][0] for a in "10"]
    propose.require("activation", "sigmoid", f"sigmoid(logit('1') - logit('0')) at the last token (token ids {ids}), "
                                             "the mxbai-rerank package's logits through a sigmoid")


class MxbaiRerankTokenizer(HFTokenizer):
    """Prefix + query part + separator + document part + separator + task + suffix, each tokenized alone as
    the mxbai-rerank package does; when truncating, the query keeps at most 3/4 of the room, the document the rest."""

    def __init__(self, pipeline) -> None:
        super().__init__(pipeline)
        self.pipeline = pipeline
        self.instruction = getattr(pipeline.args, "instruction", None)
        self.sep = self._ids(p.MXBAI_SEP)
        self.prefix = self._ids(p.MXBAI_PREFIX)
        self.tail = self.sep + self._ids(p.MXBAI_TASK) + self._ids(p.MXBAI_SUFFIX)
        self.room = self.max_len - len(self.prefix) - len(self.tail)
        if self.room < 2 + len(self.sep):
            raise ValueError(f"max_model_len={self.max_len} leaves no room for a pair within mxbai-rerank's prompt")

    def _ids(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def tokenize(self, requests: list[Request], *, truncate: bool | str = True) -> None:
        """Fill token ids; ``truncate=False`` refuses a pair longer than ``max_model_len``."""
        prefix = p.MXBAI_INSTRUCTION.format(instruction=self.instruction) + p.MXBAI_SEP if self.instruction else ""
        queries = self._batch([prefix + p.MXBAI_QUERY.format(query=r.text[0]) for r in requests])
        documents = self._batch([p.MXBAI_DOCUMENT.format(document=r.text[1]) for r in requests])
        for request, query, document in zip(requests, queries, documents):
            if truncate is True:
                query = query[: self.room * 3 // 4]
                document = document[: self.room - len(query) - len(self.sep)]
            request.token_ids = self.prefix + query + self.sep + document + self.tail
            if truncate is False and request.num_tokens > self.max_len:
                raise InputValueError(request.index, f"the formatted pair has {request.num_tokens} tokens, more "
                                 f"than max_model_len={self.max_len}; shorten it or pass truncate=True")
        mark_shared_prefixes(requests, self.pipeline)

    def _batch(self, texts: list[str]) -> list[list[int]]:
        return self.tokenizer(texts, add_special_tokens=False, return_attention_mask=False, verbose=False)["input_ids"]
