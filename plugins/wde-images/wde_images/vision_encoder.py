"""A CLIP or SigLIP vision tower alone, as ``CLIPVisionModel`` / ``SiglipVisionModel`` hold it under ``vision_model``:
what a vision-language model reuses (ColPali: PaliGemma's SigLIP tower), and the mapping of CLIP/SigLIP checkpoint
names (q/k/v into the fused QKV rows, the MLP and head renamed) that CLIP's dual encoder shares."""

from __future__ import annotations

import re

from torch import nn

from wde_images.vit import VisionTower, fold_quick_gelu

_QKV = re.compile(r"^(.+\.layers\.\d+)\.self_attn\.([qkv])_proj\.(weight|bias)$")
_RENAMES = ((".self_attn.out_proj.", ".out_proj."), (".mlp.fc1.", ".fc1."), (".mlp.fc2.", ".fc2."))
_SKIPPED = ("logit_scale", "logit_bias", "text_model.embeddings.position_ids", "vision_model.embeddings.position_ids")


def map_tower_name(model: nn.Module, name: str):
    """HF CLIP/SigLIP name -> ``(parameter, rows)`` of ``model`` (its towers under ``text_model`` / ``vision_model``):
    q/k/v into the fused QKV rows, the MLP and head renamed; ``None`` for the logit scale and stored position ids."""
    if name.startswith(_SKIPPED):
        return None
    match = _QKV.match(name)
    if match:
        prefix, part, kind = match.groups()
        size = model.get_submodule(prefix).qkv.out_features // 3
        index = "qkv".index(part)
        return f"{prefix}.qkv.{kind}", slice(index * size, (index + 1) * size)
    for old, new in _RENAMES:
        name = name.replace(old, new)
    return name.replace("head.mlp.", "head."), None


class VisionEncoder(nn.Module):
    """A vision config's tower (``model_type`` ``clip_vision_model``, ``siglip_vision_model`` or
    ``siglip2_vision_model``) under ``vision_model``; a vision-language model reads ``vision_model.patch_states``."""

    def __init__(self, vision_config, attention) -> None:
        super().__init__()
        kind = vision_config.model_type
        self.vision_model = VisionTower(vision_config, attention, siglip=kind.startswith("siglip"),
                                        naflex=kind.startswith("siglip2"))

    def after_load_weights(self) -> None:
        """Fold CLIP's quick_gelu into its layers' weights."""
        fold_quick_gelu(self)

    def map_checkpoint_name(self, name: str):
        """HF name (with or without ``vision_model.``) -> ``(parameter, rows)``."""
        return map_tower_name(self, name if name.startswith("vision_model.") else "vision_model." + name)
