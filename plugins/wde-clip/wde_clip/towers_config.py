"""Which towers a directory holds and their sizes, read from its config: a whole ``CLIPModel`` /
``SiglipModel``, or one ``...VisionModel`` / ``...TextModel`` half (with or without CLIP's projection)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


WHOLE = ("clip", "siglip", "siglip2")  # model types holding both towers


@dataclass(frozen=True)
class Towers:
    """The text and vision configs (``None`` when absent), the family, and what follows from them."""

    text: Any
    vision: Any
    siglip: bool
    projection_dim: int | None  # CLIP's shared space; None: the towers' pooled vectors are the embeddings
    naflex: bool = False  # SigLIP 2: each image its own patch grid (the processor's spatial_shapes)

    @staticmethod
    def of(config: Any, architectures: list[str]) -> "Towers":
        """The towers of a directory's ``config`` (its ``architectures`` tell a half with a projection)."""
        kind = config.model_type
        siglip = kind.startswith("siglip")
        text = getattr(config, "text_config", None) if kind in WHOLE else (
            config if kind.endswith("text_model") else None)
        vision = getattr(config, "vision_config", None) if kind in WHOLE else (
            config if kind.endswith("vision_model") else None)
        projected = not siglip and (kind == "clip" or any(a.endswith("WithProjection") for a in architectures))
        return Towers(text, vision, siglip, config.projection_dim if projected else None, kind.startswith("siglip2"))

    @property
    def tokens_per_image(self) -> int:
        """Patches per image, plus CLIP's class token (SigLIP 2: the most patches an image may have)."""
        if self.naflex:
            return self.vision.num_patches
        grid = self.vision.image_size // self.vision.patch_size
        return grid * grid + (0 if self.siglip else 1)

    @property
    def embedding_size(self) -> int:
        """The length of every vector the model returns."""
        if self.projection_dim is not None:
            return self.projection_dim
        if self.text is not None:
            return getattr(self.text, "projection_size", None) or self.text.hidden_size
        return self.vision.hidden_size

    @property
    def eos_token_id(self) -> int | None:
        """The text config's EOS id (CLIP pools there)."""
        return getattr(self.text, "eos_token_id", None)
