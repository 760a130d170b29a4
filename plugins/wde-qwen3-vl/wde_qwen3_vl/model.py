"""Qwen3-VL as a single-vector embedder (the Qwen3-VL-Embedding family): texts, images and text + image inputs
through Qwen3-VL's vision tower and wde-qwen2-bidir's Qwen3 decoder (q/k norms), the images' merged tokens at their
``<|image_pad|>`` tokens, each deepstack feature added to the hidden states at those tokens after decoder layer
0, 1, ..., and interleaved multimodal rotary positions; the last token pooled as those models pool it."""

from __future__ import annotations

import copy

import torch
from torch import nn

from wde_core.plugin_api import rope_parameters
from wde_llm_rerank.public import AnswerRows
from wde_qwen2_bidir.public import DecoderEmbedder
from wde_vision_language.public import map_vl_name
from wde_qwen3_vl.rerank import answer_head_config
from wde_qwen3_vl.vision import Qwen3VisionTower

# checkpoint prefixes (Qwen3VLForConditionalGeneration's, then Qwen3VLModel's) -> the model's submodules
_PREFIXES = (("model.visual.", "visual."), ("visual.", "visual."), ("model.language_model.", "text."),
             ("language_model.", "text."))


def mrope_components(sections: list[int], half: int) -> torch.Tensor:
    """``[2 * half]``: which position (0 temporal, 1 row, 2 column) rotates each head dimension, interleaved as
    Qwen3-VL's ``recomposition_frequencies``: frequency ``j`` takes the row's when ``j % 3 == 1`` and
    ``j < 3 * sections[1]``, the column's when ``j % 3 == 2`` and ``j < 3 * sections[2]``, else the temporal one."""
    component = torch.zeros(half, dtype=torch.long)
    for axis in (1, 2):
        component[axis: 3 * sections[axis]: 3] = axis
    return torch.cat((component, component))


def interleaved_mrope_rotary(tables, positions: torch.Tensor, sections: list[int],
                             ) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin ``[T, head_dim]`` for ``[3, T]`` positions, each dimension's angle from the position component
    :func:`mrope_components` gives it."""
    component = mrope_components(sections, tables.cos.shape[-1] // 2).to(positions.device)
    dims = torch.arange(component.numel(), device=positions.device)
    picked = positions[component]  # [head_dim, T]
    return tables.cos[picked, dims[:, None]].T, tables.sin[picked, dims[:, None]].T


def text_config(config):
    """The decoder's config as wde-qwen2-bidir reads a Qwen3 one (q/k norms, ``attention_bias`` on q/k/v/o)."""
    text = copy.deepcopy(config.text_config)
    text.model_type = "qwen3"
    return text


class Qwen3VLEmbedder(nn.Module):
    """Packed texts and images in, the decoder's last hidden states ``[T, H]`` out (the core pools them)."""

    def __init__(self, config, attention, settings=None) -> None:
        super().__init__()
        self.text = DecoderEmbedder(text_config(config), attention, settings)
        self.visual = Qwen3VisionTower(config.vision_config, attention)
        self.sections = list(rope_parameters(config.text_config).get("mrope_section") or [24, 20, 20])

    def forward(self, model_input) -> torch.Tensor:
        """Token embeddings, the images' merged tokens at their ``<|image_pad|>`` tokens, then the decoder at each
        token's interleaved (temporal, row, column) positions, deepstack features added after its first layers."""
        x = self.text.embed_tokens(model_input.input_ids)
        deepstack, index = [], model_input.image_token_index
        if model_input.pixel_patches is not None:
            images, deepstack = self.visual(model_input.pixel_patches, model_input.patch_positions,
                                            model_input.vision_metadata, model_input.position_taps,
                                            model_input.position_weights)
            x = x.index_copy(0, index, images.to(x.dtype))

        def add_deepstack(layer: int, hidden: torch.Tensor) -> torch.Tensor:
            """``hidden`` plus deepstack feature ``layer`` at the image tokens (after the first layers only)."""
            return hidden.index_add(0, index, deepstack[layer].to(hidden.dtype)) if layer < len(deepstack) else hidden

        rotary = interleaved_mrope_rotary(self.text.rotary, model_input.mrope_positions, self.sections)
        return self.text.decode(x, model_input, rotary, add_deepstack if deepstack else None)

    def after_load_weights(self) -> None:
        """RoPE tables of the decoder and of the vision tower."""
        self.text.after_load_weights()
        self.visual.after_load_weights()

    def map_checkpoint_name(self, name: str):
        """``(parameter, rows)`` for a checkpoint name of either layout; ``None`` for the language-model head."""
        return map_vl_name(self, name, _PREFIXES)


class Qwen3VLReranker(AnswerRows, Qwen3VLEmbedder):
    """Qwen3-VL-Reranker: the embedder's decoder, then the "yes" and "no" rows of the language-model head (or of the
    tied embeddings) at each pair's last token."""

    def __init__(self, config, attention, settings=None) -> None:
        super().__init__(config, attention, settings)
        self.init_answer_rows(answer_head_config(config), settings, tied_by_default=False)

    @property
    def embed_tokens(self) -> nn.Module:
        """The decoder's token embeddings (``AnswerRows`` reads the tied head's rows from them)."""
        return self.text.embed_tokens

    def head(self, pooled: torch.Tensor) -> torch.Tensor:
        """``[B, 1]``: logit("yes") - logit("no") of each pair's last token."""
        logits = self.answer_logits(pooled)
        return logits[:, :1] - logits[:, 1:]
