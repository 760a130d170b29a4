"""Registers the stages every LLM reranker's workflow shares: the ``llm-rerank`` engine arguments, the ``llm-pairs``
input processor and the ``yes-no-score`` output processor (each model family registers its own pair tokenizer)."""

from __future__ import annotations

from wde_core.plugin_api import hookimpl

_S = "wde_llm_rerank.stages"


@hookimpl
def wde_register_engine_args(register):
    """The core's arguments plus ``instruction`` (the rerank task) and ``share_prefix``."""
    register("llm-rerank", f"{_S}:LlmRerankEngineArgs", "the core's arguments plus instruction (the rerank task)")


@hookimpl
def wde_register_input_processors(register):
    """(query, document) pairs for LLM rerankers."""
    register("llm-pairs", f"{_S}:PairInputProcessor", "(query, document) pairs, checked before any work")


@hookimpl
def wde_register_output_processors(register):
    """One yes/no score per pair."""
    register("yes-no-score", f"{_S}:YesNoScoreOutputProcessor", "sigmoid(logit yes - logit no) per pair")
