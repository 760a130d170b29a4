"""Registers the rotary-position encoders (NomicBert, GTE v2) for the core's embed workflow, and their
``...ForSequenceClassification`` cross-encoders (gte-multilingual-reranker-base style) on wde-cross-encoder's
``rerank`` (one label) and ``classify`` (several labels) workflows, by their registered names."""

from __future__ import annotations

from wde_core.plugin_api import ArchitectureLink, hookimpl
from wde_cross_encoder.public import cross_encoder_links

# architecture -> (pooling when the directory has no sentence-transformers files, description);
# one model class serves both, configured by the checkpoint's config
ARCHITECTURES = {
    "NomicBertModel": ("mean", "NomicBert encoder (nomic-embed-text-v1/v1.5): RoPE, SwiGLU, no biases, post-norm"),
    "GteModel": ("cls", "GTE v2 encoder (gte-*-v1.5, gte-multilingual-base): RoPE (large theta), gated GELU, biases"),
}


@hookimpl
def wde_register_architectures(register):
    """NomicBert (mean pooling) and GTE v2 (CLS) use the core's embed workflow unless the directory says otherwise."""
    for architecture, (pooling, description) in ARCHITECTURES.items():
        register(ArchitectureLink(
            architecture=architecture,
            task="embed",
            workflow="embed",
            model="wde_rope_encoders.model:RopeEncoder",
            defaults={"pooling": pooling, "normalize": False},
            description=description,
        ))


CROSS_ENCODERS = ("GteForSequenceClassification", "NomicBertForSequenceClassification")


@hookimpl(specname="wde_register_architectures")
def register_cross_encoders(register):
    """The cross-encoders rerank with ``num_labels == 1`` and classify with more labels."""
    for architecture in CROSS_ENCODERS:
        family = architecture[:-len("ForSequenceClassification")]
        for link in cross_encoder_links(architecture, "wde_rope_encoders.model:RopeCrossEncoder",
                                        family + " cross-encoder ({variant}): {task}; first token -> dense + tanh "
                                        "-> classifier"):
            register(link)
