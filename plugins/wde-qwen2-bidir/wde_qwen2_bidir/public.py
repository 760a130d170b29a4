"""wde-qwen2-bidir's public API for other plugins' LLM rerankers: ``AnswerRows`` (a model mixin keeping only
the answer tokens' rows of the language-model head), ``answer_token_ids`` (the ids of "yes" and "no" in a
model's tokenizer), ``names_of`` (what variant matchers read; ``name_match``, a matcher's reason when one of
them holds a fragment) and ``require_answer_at_last_token`` (the settings every LLM reranker's ``configure`` requires) and
``mark_shared_prefixes`` (a reranker tokenizer's last step: pairs of one query share their leading tokens) and
``DecoderEmbedder`` (the Qwen2/Qwen3/Llama/Mistral decoder; ``decode`` runs it from input embeddings). Imports
torch: the plugin's entry point does not import this module."""

from wde_qwen2_bidir.llm_rerank import (AnswerRows, answer_token_ids, name_match, names_of,
                                       require_answer_at_last_token)
from wde_qwen2_bidir.model import DecoderEmbedder
from wde_qwen2_bidir.rerank_stages import mark_shared_prefixes

__all__ = ["AnswerRows", "answer_token_ids", "name_match", "DecoderEmbedder", "mark_shared_prefixes", "names_of",
           "require_answer_at_last_token"]
