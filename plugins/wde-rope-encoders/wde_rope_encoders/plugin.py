"""Registers the rotary-position encoders (NomicBert, GTE v2) for the core's embed workflow, and their
``...ForSequenceClassification`` cross-encoders (gte-multilingual-reranker-base style) on wde-reranker's
``rerank`` (one label) and ``classify`` (several labels) workflows, by their registered names."""

from __future__ import annotations

from wde_core.plugin_api import ArchitectureLink, hookimpl

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
VARIANTS = (  # task, variant, matcher (wde-reranker's), workflow (wde-reranker's)
    ("rerank", "single-logit", "wde_reranker.public:has_one_label", "rerank"),
    ("classify", "several-labels", "wde_reranker.public:has_several_labels", "classify"),
)


@hookimpl(specname="wde_register_architectures")
def register_cross_encoders(register):
    """The cross-encoders rerank with ``num_labels == 1`` and classify with more labels."""
    for architecture in CROSS_ENCODERS:
        for task, variant, matches, workflow in VARIANTS:
            register(ArchitectureLink(
                architecture=architecture, task=task, workflow=workflow,
                model="wde_rope_encoders.model:RopeCrossEncoder",
                defaults={"pooling": "cls", "normalize": False}, variant=variant, matches=matches,
                configure="wde_reranker.public:choose_activation",
                description=f"{architecture[:-len('ForSequenceClassification')]} cross-encoder ({variant}): {task}; "
                            "first token -> dense + tanh -> classifier",
            ))
