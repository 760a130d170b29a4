"""Registers ``DebertaV2ForSequenceClassification``: one label reranks, several labels classify; and
``DebertaV2ForTokenClassification`` for the token_classify task (the core's embed workflow's stages).

The stages are wde-cross-encoder's, by their registered names: the ``rerank`` and ``classify`` workflows
(pair input processor, pair tokenizer, score and label output processors); its ``cross_encoder_links`` names
the label-count matchers.
"""

from __future__ import annotations

from wde_core.plugin_api import ArchitectureLink, hookimpl
from wde_cross_encoder.public import cross_encoder_links

ARCHITECTURE = "DebertaV2ForSequenceClassification"
MODEL = "wde_deberta.model:DebertaV2CrossEncoder"

@hookimpl
def wde_register_architectures(register):
    """DeBERTa-v2/v3 cross-encoders rerank with ``num_labels == 1`` and classify with more labels; token
    classifiers (NER, PII) serve the token_classify task with the core's stages."""
    for link in cross_encoder_links(ARCHITECTURE, MODEL, "DeBERTa-v2/v3 cross-encoder ({variant}): {task}; "
                                    "disentangled relative attention", configure="wde_deberta.settings:configure"):
        register(link)
    register(ArchitectureLink(
        architecture="DebertaV2ForTokenClassification", task="token_classify", workflow="embed",
        model="wde_deberta.model:DebertaV2TokenClassifier", defaults={"pooling": "cls", "normalize": False},
        configure="wde_deberta.settings:note_attention",
        description="DeBERTa-v2/v3 token classifier (NER, PII): per-token logits for classify_tokens",
    ))
