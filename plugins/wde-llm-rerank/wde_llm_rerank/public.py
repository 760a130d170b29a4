"""What LLM-reranker plugins use of wde-llm-rerank: ``AnswerRows`` (a model mixin keeping only the answer tokens'
rows of the language-model head), ``answer_token_ids`` (the ids of "yes" and "no" in a model's tokenizer),
``names_of`` (what variant matchers read; ``name_match``, a matcher's reason when one of them holds a fragment),
``require_answer_at_last_token`` (the settings every LLM reranker's ``configure`` requires) and
``mark_shared_prefixes`` (a pair tokenizer's last step: pairs of one query share their leading tokens). Their
workflows name this plugin's ``llm-pairs`` input processor, ``yes-no-score`` output processor and ``llm-rerank``
engine arguments. Imports torch: the plugin's entry point does not import this module."""

from wde_llm_rerank.answers import AnswerRows, answer_token_ids, name_match, names_of, require_answer_at_last_token
from wde_llm_rerank.stages import mark_shared_prefixes

__all__ = ["AnswerRows", "answer_token_ids", "name_match", "names_of", "mark_shared_prefixes",
           "require_answer_at_last_token"]
