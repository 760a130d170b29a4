"""Registers ModernBERT: ``ModernBertModel`` (and ``ModernBertForMaskedLM`` checkpoints) for the core's embed
workflow, ``ModernBertForSequenceClassification`` for wde-cross-encoder's ``rerank``/``classify`` workflows and
``ModernBertForTokenClassification`` for the token_classify task (the core's stages)."""

from __future__ import annotations

from wde_core.plugin_api import ArchitectureLink, hookimpl
from wde_cross_encoder.public import cross_encoder_links

_P = "wde_modernbert"
EMBEDDERS = {
    "ModernBertModel": "ModernBERT encoder (gte-modernbert-base, modernbert-embed-base): global + local attention",
    "ModernBertForMaskedLM": "ModernBERT encoder of an MLM checkpoint (the MLM head skipped)",
}


@hookimpl
def wde_register_architectures(register):
    """Embedders: mean pooling unless the directory says otherwise; cross-encoders: ``classifier_pooling``;
    the token classifier: per-token logits."""
    for architecture, description in EMBEDDERS.items():
        register(ArchitectureLink(
            architecture=architecture, task="embed", workflow="embed", model=f"{_P}.model:ModernBertEncoder",
            defaults={"pooling": "mean", "normalize": False}, configure=f"{_P}.settings:configure_embed",
            description=description,
        ))
    for link in cross_encoder_links("ModernBertForSequenceClassification", f"{_P}.model:ModernBertCrossEncoder",
                                    "ModernBERT cross-encoder ({variant}): {task} (gte-reranker-modernbert-base)",
                                    configure=f"{_P}.settings:configure_cross_encoder"):
        register(link)
    register(ArchitectureLink(
        architecture="ModernBertForTokenClassification", task="token_classify", workflow="embed",
        model=f"{_P}.model:ModernBertTokenClassifier", defaults={"pooling": "cls", "normalize": False},
        configure=f"{_P}.settings:configure_embed",
        description="ModernBERT token classifier (NER, PII): per-token logits for classify_tokens",
    ))
