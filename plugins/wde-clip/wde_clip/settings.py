"""The decisions an image-text directory implies: causal text attention for CLIP, the text length limit, and
what ``wde inspect`` shows of the images (size, patches, preprocessing)."""

from __future__ import annotations

import json

from wde_clip.towers_config import Towers


def configure(propose, directory, args) -> None:
    """Propose the settings of a CLIP or SigLIP directory and describe its image preprocessing."""
    towers = Towers.of(directory.config, directory.architectures)
    family = "SigLIP" if towers.siglip else "CLIP"
    propose.require("causal", not towers.siglip and towers.text is not None,
                    f"{family}'s text tower is {'bidirectional' if towers.siglip else 'causal'}")
    propose.suggest("pooling", "cls", f"{family} pools inside its towers")
    if towers.text is not None:
        limit = towers.text.max_position_embeddings
        propose.length_limit = (limit, f"the text tower's {limit} positions")
        pad = "padded to max_model_len, every position attended, pooled at the last" if towers.siglip else \
            "causal, pooled at the EOS token"
        propose.notes["text"] = f"{family} text tower: {pad}"
    if towers.vision is not None:
        propose.notes["images"] = image_note(directory, towers)


def image_note(directory, towers: Towers) -> str:
    """Image size, patch grid and the preprocessing ``preprocessor_config.json`` asks for."""
    path = directory.path / "preprocessor_config.json"
    if not path.is_file():
        raise ValueError(f"model {directory.name!r}: no preprocessor_config.json; wde preprocesses images "
                         "exactly as it says")
    config = json.loads(path.read_text())
    v = towers.vision
    if towers.naflex:
        return (f"NaFlex: each image resized to its own grid of {v.patch_size} px patches, at most "
                f"{config.get('max_num_patches', v.num_patches)} patches (tokens), the {v.num_patches} position "
                f"embeddings resized to it; {config.get('image_processor_type', 'image processor')}: convert to RGB, "
                f"rescale, normalize (mean {config.get('image_mean')}, std {config.get('image_std')})")
    grid = v.image_size // v.patch_size
    steps = [f"resize to {config.get('size')}" if config.get("do_resize", True) else None,
             f"center crop to {config.get('crop_size')}" if config.get("do_center_crop") else None,
             f"rescale by {config.get('rescale_factor', 1 / 255):.6g}" if config.get("do_rescale", True) else None,
             f"normalize (mean {config.get('image_mean')}, std {config.get('image_std')})"
             if config.get("do_normalize", True) else None]
    cls = "" if towers.siglip else " + a class token"
    return (f"{v.image_size} x {v.image_size} px, {grid} x {grid} patches of {v.patch_size} px{cls} = "
            f"{towers.tokens_per_image} tokens per image; {config.get('image_processor_type', 'image processor')}: "
            f"convert to RGB, {', '.join(s for s in steps if s)}")
