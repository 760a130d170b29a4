"""Registers ``DebertaV2ForSequenceClassification``: one label reranks, several labels classify; and
``DebertaV2ForTokenClassification`` for the token_classify task (the core's embed workflow's stages).

The stages are wde-reranker's, by their registered names: the ``rerank`` and ``classify`` workflows
(pair input processor, pair tokenizer, score and label output processors) and its label-count matchers.
"""

from __future__ import annotations

from wde_core.plugin_api import ArchitectureLink, hookimpl

ARCHITECTURE = "DebertaV2ForSequenceClassification"
MODEL = "wde_deberta.model:DebertaV2CrossEncoder"
VARIANTS = (  # task, variant, matcher (wde-reranker's), workflow (wde-reranker's)
    ("rerank", "single-logit", "wde_reranker.public:has_one_label", "rerank"),
    ("classify", "several-labels", "wde_reranker.public:has_several_labels", "classify"),
)


@hookimpl
def wde_register_architectures(register):
    """DeBERTa-v2/v3 cross-encoders rerank with ``num_labels == 1`` and classify with more labels; token
    classifiers (NER, PII) serve the token_classify task with the core's stages."""
    for task, variant, matches, workflow in VARIANTS:
        register(ArchitectureLink(
            architecture=ARCHITECTURE, task=task, workflow=workflow, model=MODEL,
            defaults={"pooling": "cls", "normalize": False}, variant=variant, matches=matches,
            configure="wde_deberta.settings:configure",
            description=f"DeBERTa-v2/v3 cross-encoder ({variant}): {task}; disentangled relative attention",
        ))
    register(ArchitectureLink(
        architecture="DebertaV2ForTokenClassification", task="token_classify", workflow="embed",
        model="wde_deberta.model:DebertaV2TokenClassifier", defaults={"pooling": "cls", "normalize": False},
        configure="wde_deberta.settings:note_attention",
        description="DeBERTa-v2/v3 token classifier (NER, PII): per-token logits for classify_tokens",
    ))
