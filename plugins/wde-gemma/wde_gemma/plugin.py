"""Registers Gemma 3 text (``Gemma3TextModel``, EmbeddingGemma) for the core's embed workflow."""

from __future__ import annotations

from wde_core.plugin_api import ArchitectureLink, hookimpl


@hookimpl
def wde_register_architectures(register):
    """``Gemma3TextModel`` embeds through the core's workflow; attention follows ``use_bidirectional_attention``."""
    register(ArchitectureLink(
        architecture="Gemma3TextModel",
        task="embed",
        workflow="embed",
        model="wde_gemma3.model:Gemma3Embedder",
        defaults={"pooling": "mean", "normalize": True},
        configure="wde_gemma3.model:configure",
        description="Gemma 3 text (EmbeddingGemma): sliding-window and global layers, q/k norms, GeGLU, "
                    "bidirectional when the config says so",
    ))
