"""Qwen3-VL's vision tower: Qwen2-VL's skeleton (wde-vision-language's ``VisionTower``: patches packed across images, 2D
rotary positions, the engine's varlen attention, the 2x2 merger) with a biased patch embedding, learned position
embeddings bilinearly interpolated to each image's grid (the taps and weights come with the batch), layer-norm blocks
with a two-layer MLP (``linear_fc1``/``linear_fc2``, GELU-tanh), and **deepstack**: after each block in
``deepstack_visual_indexes`` the patches go through a merger of their own (normed after the 2x2 shuffle), whose
tokens the decoder adds to its hidden states at the image tokens after its first layers."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from wde_core.plugin_api import Linear
from wde_vision_language.public import PatchMerger, VisionBlock, VisionTower

# the checkpoint's merger names -> wde-vision-language's PatchMerger's
_MERGER_NAMES = ((".norm.", ".ln_q."), (".linear_fc1.", ".mlp.0."), (".linear_fc2.", ".mlp.2."))


class Qwen3VisionBlock(VisionBlock):
    """Qwen2-VL's block (layer norms, fused QKV, 2D RoPE) with Qwen3-VL's MLP: ``linear_fc2(act(linear_fc1(x)))``."""

    def build_mlp(self, config, width: int) -> nn.Module:
        """``linear_fc1`` (its activation fused) and ``linear_fc2``, both biased."""
        mlp = nn.Module()
        mlp.linear_fc1 = Linear(width, config.intermediate_size, activation=config.hidden_act)
        mlp.linear_fc2 = Linear(config.intermediate_size, width)
        return mlp

    def feed_forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        """``residual + linear_fc2(act(linear_fc1(x)))``."""
        return self.mlp.linear_fc2(self.mlp.linear_fc1(x), residual=residual)

    def after_load_weights(self) -> None:
        """Nothing to fold."""


class PostShuffleMerger(PatchMerger):
    """A deepstack merger: each 2x2 block of patches concatenated first, then normed (over ``4 * width``)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``[N, width]`` patches -> ``[N / merge^2, out_width]`` tokens."""
        return self.mlp(self.ln_q(x.view(-1, self.width)))


class Qwen3VisionTower(VisionTower):
    """Packed patches of a batch's images -> their merged tokens ``[N / merge^2, out_width]`` and one deepstack
    feature of that shape per ``deepstack_visual_indexes`` entry."""

    block_class = Qwen3VisionBlock

    def __init__(self, config, attention) -> None:
        super().__init__(config, attention)
        width, out_width = self.widths(config)
        self.patch_embed.proj.bias = nn.Parameter(torch.empty(width))
        self.pos_embed = nn.Embedding(config.num_position_embeddings, width)
        self.deepstack_layers = list(config.deepstack_visual_indexes)
        merged = width * config.spatial_merge_size ** 2
        self.deepstack_merger_list = nn.ModuleList(
            PostShuffleMerger(config, width, out_width, nn.LayerNorm(merged, eps=1e-6)) for _ in self.deepstack_layers)

    @staticmethod
    def widths(config) -> tuple[int, int]:
        """``(hidden_size, out_hidden_size)``."""
        return config.hidden_size, config.out_hidden_size

    def map_checkpoint_name(self, name: str):
        """The mergers' ``norm``/``linear_fc1``/``linear_fc2`` -> ``ln_q``/``mlp.0``/``mlp.2``; others as they are."""
        if name.startswith(("merger.", "deepstack_merger_list.")):
            for theirs, ours in _MERGER_NAMES:
                name = name.replace(theirs, ours)
        return name, None

    def positions(self, taps: torch.Tensor, weights: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """``[N, width]``: each patch's learned position embedding, interpolated from the table's square grid (the
        weighted sum of its taps' rows, in float32 as transformers' weights are)."""
        return (self.pos_embed.weight[taps].float() * weights[..., None]).sum(1).to(dtype)

    def forward(self, patches: torch.Tensor, positions: torch.Tensor, metadata, taps: torch.Tensor,
                weights: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """The merged image tokens (images one after another) and the deepstack features, both at the image
        tokens' rows."""
        weight = self.patch_embed.proj.weight
        x = F.linear(patches.to(weight.dtype), weight.view(weight.shape[0], -1), self.patch_embed.proj.bias)
        x = x + self.positions(taps, weights, x.dtype)
        cos, sin = self.rotary(positions)
        deepstack = []
        for index, block in enumerate(self.blocks):
            x = block(x, cos, sin, metadata)
            if index in self.deepstack_layers:
                deepstack.append(self.deepstack_merger_list[self.deepstack_layers.index(index)](x))
        return self.merger(x), deepstack
