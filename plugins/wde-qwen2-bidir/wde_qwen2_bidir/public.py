"""wde-qwen2-bidir's public API for other plugins' LLM rerankers: ``AnswerRows`` (a model mixin keeping only
the answer tokens' rows of the language-model head), ``names_of`` (what variant matchers read) and
``require_answer_at_last_token`` (the settings every LLM reranker's ``configure`` requires). Imports
torch: the plugin's entry point does not import this module."""

from wde_qwen2_bidir.llm_rerank import AnswerRows, names_of, require_answer_at_last_token

__all__ = ["AnswerRows", "names_of", "require_answer_at_last_token"]
