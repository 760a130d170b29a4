"""Registers the rotary-position encoders (NomicBert, GTE v2) for the core's embed workflow."""

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
