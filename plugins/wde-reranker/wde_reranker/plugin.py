"""Registers the BERT-family cross-encoders (``BertForSequenceClassification``,
``ElectraForSequenceClassification``: one label reranks, several classify, on wde-cross-encoder's workflows)
and ``ElectraModel`` as an embedder."""

from __future__ import annotations

from wde_core.plugin_api import ArchitectureLink, hookimpl
from wde_cross_encoder.public import cross_encoder_links

_P = "wde_reranker"
MODELS = {
    "BertForSequenceClassification": f"{_P}.models:BertCrossEncoder",
    "ElectraForSequenceClassification": f"{_P}.electra:ElectraCrossEncoder",
}


@hookimpl
def wde_register_architectures(register):
    """Each architecture reranks with ``num_labels == 1`` and classifies with more labels; ``ElectraModel`` embeds."""
    for architecture, model in MODELS.items():
        for link in cross_encoder_links(architecture, model, "cross-encoder ({variant}): {task}"):
            register(link)
    register(ArchitectureLink(
        architecture="ElectraModel", task="embed", workflow="embed", model=f"{_P}.electra:ElectraEncoder",
        defaults={"pooling": "cls", "normalize": False},
        description="ELECTRA encoder (the cross-encoders' backbone) as an embedder: BERT layers, projected embeddings",
    ))
