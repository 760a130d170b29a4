"""What Qwen2-VL's and Qwen2.5-VL's models share: the decoder's config as wde-qwen2-bidir reads it, the images' merged
patches put at their tokens, and the decoder's rotary tables picked by multimodal positions (M-RoPE: each of the
temporal, height and width positions rotating its section of the head)."""

from __future__ import annotations

import copy

import torch


def text_config(vl_config):
    """The decoder's config as wde-qwen2-bidir reads a Qwen2 one (Qwen2-VL's q/k/v have biases)."""
    text = copy.deepcopy(vl_config.text_config)
    text.model_type = "qwen2"
    return text


def mrope_rotary(tables, positions: torch.Tensor, sections: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin ``[T, head_dim]`` for ``[3, T]`` positions: frequencies of section ``k`` (``sections`` over half the
    head) take position component ``k``, as transformers' ``recomposition_frequencies``."""
    component = torch.cat([torch.full((size,), k % 3) for k, size in enumerate(sections)])
    component = torch.cat((component, component)).to(positions.device)
    dims = torch.arange(component.numel(), device=positions.device)
    picked = positions[component]  # [head_dim, T]: each dimension's position component
    return tables.cos[picked, dims[:, None]].T, tables.sin[picked, dims[:, None]].T


def embed_with_images(model, model_input) -> torch.Tensor:
    """Token embeddings of ``model`` (a ``text`` decoder and a ``visual`` tower), the batch's images' merged patches
    put at their ``<|image_pad|>`` tokens."""
    x = model.text.embed_tokens(model_input.input_ids)
    if model_input.pixel_patches is None:
        return x
    images = model.visual(model_input.pixel_patches, model_input.patch_positions, model_input.vision_metadata,
                          model_input.vision_windows)
    return x.index_copy(0, model_input.image_token_index, images.to(x.dtype))
