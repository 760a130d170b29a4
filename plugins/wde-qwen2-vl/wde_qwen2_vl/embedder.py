"""Qwen2-VL as a single-vector embedder (GME, DSE and other ``Qwen2VLForConditionalGeneration`` / ``Qwen2VLModel``
embedders): texts, images and text + image inputs through the vision tower and the decoder with multimodal rotary
positions (M-RoPE), pooled at the last token as those models are."""

from __future__ import annotations

import torch
from torch import nn

from wde_qwen2_bidir.public import DecoderEmbedder
from wde_qwen2_vl.vl_decoder import embed_with_images, mrope_rotary, text_config
from wde_vision_language.public import map_vl_name, vision_tower


class Qwen2VLEmbedder(nn.Module):
    """Packed texts and images in, the decoder's last hidden states ``[T, H]`` out (the core pools them)."""

    def __init__(self, config, attention, settings=None) -> None:
        super().__init__()
        self.text = DecoderEmbedder(text_config(config), attention, settings)
        self.visual = vision_tower(config.vision_config, attention)
        params = getattr(config.text_config, "rope_parameters", None) or {}
        self.sections = list(params.get("mrope_section") or [16, 24, 24])

    def forward(self, model_input) -> torch.Tensor:
        """Token embeddings, the images' merged patches at their ``<|image_pad|>`` tokens, then the decoder at each
        token's (temporal, row, column) positions."""
        x = embed_with_images(self, model_input)
        return self.text.decode(x, model_input, mrope_rotary(self.text.rotary, model_input.mrope_positions,
                                                             self.sections))

    def after_load_weights(self) -> None:
        """RoPE tables of the decoder and of the vision tower."""
        self.text.after_load_weights()
        self.visual.after_load_weights()

    def map_checkpoint_name(self, name: str):
        """The vision tower and language model of either transformers layout; ``None`` for the LM head."""
        return map_vl_name(self, name)
