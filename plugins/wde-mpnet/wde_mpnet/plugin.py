"""Registers the MPNet architectures for the core's embed workflow."""

from __future__ import annotations

from wde_core.plugin_api import ArchitectureLink, hookimpl

PADDING_IDX = 1  # MPNet's <pad> (fixed in HF's MPNetEmbeddings); positions start at PADDING_IDX + 1
MPNET_ARCHITECTURES = ("MPNetModel", "MPNetForMaskedLM")


@hookimpl
def wde_register_architectures(register):
    """MPNet checkpoints embed with the core's embed workflow; CLS pooling unless the directory says otherwise."""
    for architecture in MPNET_ARCHITECTURES:
        register(ArchitectureLink(
            architecture=architecture,
            task="embed",
            workflow="embed",
            model="wde_mpnet.model:MPNetEncoder",
            defaults={"pooling": "cls", "normalize": False, "position_offset": PADDING_IDX + 1},
            description="MPNet encoder: absolute positions from padding_idx + 1, relative position bias",
            position_bias=True,
        ))
