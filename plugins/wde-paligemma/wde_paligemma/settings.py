"""Settings of ColPali: attention over the whole query or page (PaliGemma's prefix), positions from 1, no pooled
normalization (every token's vector is normalized by the model), and what ``wde inspect`` shows of the pages."""

from __future__ import annotations


def configure(propose, directory, args) -> None:
    """Refuse what wde-paligemma does not run (PaliGemma 2's Gemma 2), then propose ColPali's settings."""
    from wde_core.plugin_api import rope_type

    vlm = directory.config.vlm_config
    text, vision = vlm.text_config, vlm.vision_config
    if text.model_type != "gemma":
        raise ValueError(f"model {directory.name!r}: vlm_config.text_config.model_type={text.model_type!r}; "
                         "wde-paligemma runs PaliGemma's Gemma decoder (model_type 'gemma': ColPali v1.x), not "
                         "PaliGemma 2's")
    if vision.model_type != "siglip_vision_model":
        raise ValueError(f"model {directory.name!r}: vlm_config.vision_config.model_type={vision.model_type!r}; "
                         "wde-paligemma runs PaliGemma's SigLIP tower (model_type 'siglip_vision_model')")
    rope_type(text)  # refuse a RoPE wde does not implement before anything loads
    propose.require("causal", False, "PaliGemma's prefix-LM: ColPaliProcessor marks every token of a query or page "
                                     "as prefix (token_type_ids 0), so every token attends to all")
    propose.require("normalize", False, "each token's vector is normalized by the model itself")
    propose.require("position_offset", 1, "PaliGemma's positions count from 1")
    propose.length_limit = (text.max_position_embeddings - 1, "Gemma's max_position_embeddings, counted from 1")
    grid = vision.image_size // vision.patch_size
    propose.notes["images"] = (f"pages resized to {vision.image_size} x {vision.image_size} px, {grid} x {grid} "
                               f"patches of {vision.patch_size} px = {grid * grid} <image> tokens, then <bos>, the "
                               "visual prompt and a newline (ColPaliProcessor)")
