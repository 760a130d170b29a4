"""ColQwen2 (``ColQwen2ForRetrieval``): Qwen2-VL's vision tower and Qwen2 decoder, then a linear projection of every
token's last state, L2-normalized: one vector per token (ColPali's late interaction, scored by MaxSim).

As transformers' ``ColQwen2ForRetrieval`` runs it: the image tokens' embeddings are the vision tower's merged
patches, and the decoder's positions are the plain ones of each sequence (the model calls its language model with
input embeddings only, so no multimodal rotary positions are computed)."""

from __future__ import annotations

import torch
from torch import nn

from wde_core.plugin_api import Linear
from wde_qwen2_bidir.public import DecoderEmbedder
from wde_qwen2_vl.vl_decoder import embed_with_images, text_config
from wde_vision_language.public import map_vl_name, vision_tower


class ColQwen2(nn.Module):
    """Packed texts and pages in, ``{"hidden": [T, H], "multi_vector": [T, dim]}`` out (the second when asked)."""

    def __init__(self, config, attention, settings=None) -> None:
        super().__init__()
        self.image_token_id = config.vlm_config.image_token_id
        self.text = DecoderEmbedder(text_config(config.vlm_config), attention, settings)
        self.visual = vision_tower(config.vlm_config.vision_config, attention)
        self.embedding_proj_layer = Linear(config.vlm_config.text_config.hidden_size, config.embedding_dim)

    def forward(self, model_input) -> dict[str, torch.Tensor]:
        """Token embeddings, the images' merged patches put at their ``<|image_pad|>`` tokens, then the decoder."""
        x = embed_with_images(self, model_input)
        hidden = self.text.decode(x, model_input)
        heads = {"hidden": hidden}
        if "multi_vector" in model_input.outputs:
            vectors = self.embedding_proj_layer(hidden).float()
            heads["multi_vector"] = vectors / vectors.norm(dim=-1, keepdim=True)
        return heads

    def after_load_weights(self) -> None:
        """RoPE tables of the decoder and of the vision tower."""
        self.text.after_load_weights()
        self.visual.after_load_weights()

    def map_checkpoint_name(self, name: str):
        """``vlm.``'s vision tower and language model (either layout), the projection; ``None`` for the LM head."""
        name = name.removeprefix("vlm.")
        if name.startswith("embedding_proj_layer."):
            return name, None
        return map_vl_name(self, name)
