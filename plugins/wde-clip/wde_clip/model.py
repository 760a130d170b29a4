"""The dual encoder: a text tower and a vision tower (wde-images' ViT; either may be absent) whose vectors share one
space, with HF ``CLIPModel`` / ``SiglipModel`` checkpoint names mapped onto them."""

from __future__ import annotations

import torch
from torch import nn

from wde_clip.text_tower import TextTower
from wde_clip.towers_config import Towers
from wde_core.plugin_api import Linear
from wde_images.public import VisionTower, fold_quick_gelu, map_tower_name


class DualEncoder(nn.Module):
    """Texts and images of one packed batch, each through its tower (and CLIP's projections): the batch's
    vectors ``[B, D]`` in batch order, returned as the ``dense`` output."""

    def __init__(self, config, attention, settings=None) -> None:
        super().__init__()
        towers = Towers.of(config, list(getattr(config, "architectures", None) or []))
        self.towers = towers
        self.text_model = TextTower(towers.text, attention, siglip=towers.siglip) if towers.text else None
        self.vision_model = VisionTower(towers.vision, attention, siglip=towers.siglip, naflex=towers.naflex) \
            if towers.vision else None
        self.text_projection = self.visual_projection = None
        if towers.projection_dim is not None and towers.text is not None:
            self.text_projection = Linear(towers.text.hidden_size, towers.projection_dim, bias=False)
        if towers.projection_dim is not None and towers.vision is not None:
            self.visual_projection = Linear(towers.vision.hidden_size, towers.projection_dim, bias=False)

    def forward(self, batch) -> dict[str, torch.Tensor]:
        """``{"dense": [B, D]}`` (and the same as ``hidden``): each text's or image's vector in batch order."""
        parts = []
        if batch.texts is not None:
            vectors = self.text_model(batch.texts)
            parts.append((batch.text_rows, vectors if self.text_projection is None else self.text_projection(vectors)))
        if batch.pixel_values is not None:
            vectors = self.vision_model(batch)
            projection = self.visual_projection
            parts.append((batch.image_rows, vectors if projection is None else projection(vectors)))
        dense = parts[0][1].new_empty(batch.num_seqs, parts[0][1].shape[1])
        for rows, vectors in parts:
            dense.index_copy_(0, rows, vectors)
        return {"hidden": dense, "dense": dense}

    def after_load_weights(self) -> None:
        """Fold CLIP's quick_gelu into its layers' weights (wde-images' ``EncoderLayer.fold_quick_gelu``)."""
        fold_quick_gelu(self)

    def map_checkpoint_name(self, name: str):
        """HF name -> ``(parameter, rows)``: q/k/v into the fused QKV rows, the MLP and head renamed."""
        if self.text_model is None or self.vision_model is None:  # a tower alone: saved with or without its prefix
            tower = "text_model." if self.vision_model is None else "vision_model."
            name = name if name.startswith((tower, "text_projection", "visual_projection")) else tower + name
        return map_tower_name(self, name)
