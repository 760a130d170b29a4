"""Qwen2-VL's vision tower over packed images: patches of ``temporal_patch_size x patch_size x patch_size`` pixels
(as transformers' ``Qwen2VLImageProcessor`` flattens them, 2x2 merge blocks side by side) through a linear patch
embedding, pre-norm layers with fused QKV, 2D rotary positions (height and width, each over a quarter of the head)
and wde's varlen attention (bidirectional, within each image), then the merger: each 2x2 block of patches
concatenated, layer-normed and projected to the decoder's width, one token per block."""

from __future__ import annotations

import torch
from torch import nn

from wde_core.plugin_api import Linear, rope_parameters, rotate

QUICK_GELU = 1.702  # quick_gelu(x) = x * sigmoid(1.702 x) = silu(1.702 x) / 1.702


def patch_positions(grids: list[tuple[int, int, int]], merge: int) -> torch.Tensor:
    """``[patches, 2]``: each patch's (row, column) in its image, in the processor's order (merge blocks row-major,
    the patches of a block row-major), frames after frames."""
    out = []
    for t, h, w in grids:
        rows, cols = torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")
        block = (h // merge, merge, w // merge, merge)
        rows, cols = (x.reshape(block).transpose(1, 2).flatten() for x in (rows, cols))
        out.append(torch.stack((rows, cols), dim=-1).repeat(t, 1))
    return torch.cat(out)


class VisionBlock(nn.Module):
    """``x + proj(attn(norm1(x)))``, then ``x + fc2(act(fc1(norm2(x))))``, queries and keys rotated by position."""

    def __init__(self, config, attention) -> None:
        super().__init__()
        dim = config.embed_dim
        self.num_heads, self.head_dim = config.num_heads, dim // config.num_heads
        self.attention = attention
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.attn = nn.Module()
        self.attn.qkv = Linear(dim, 3 * dim)
        self.attn.proj = Linear(dim, dim)
        self.mlp = nn.Module()
        # quick_gelu as silu on fc1 scaled by 1.702 (fc2 by 1 / 1.702), folded in once loaded: the activation then
        # fuses into fc1's matrix product on CPU instead of two passes over [patches, 4 * dim]
        self.quick_gelu = config.hidden_act == "quick_gelu"
        self.mlp.fc1 = Linear(dim, int(dim * config.mlp_ratio), activation="silu" if self.quick_gelu else config.hidden_act)
        self.mlp.fc2 = Linear(int(dim * config.mlp_ratio), dim)

    def fold_quick_gelu(self) -> None:
        """Scale the loaded fc1 by 1.702 and fc2 by 1 / 1.702: silu in fc1 is then quick_gelu."""
        if self.quick_gelu:
            self.mlp.fc1.weight.data.mul_(QUICK_GELU)
            self.mlp.fc1.bias.data.mul_(QUICK_GELU)
            self.mlp.fc2.weight.data.div_(QUICK_GELU)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, metadata) -> torch.Tensor:
        """One block over the packed patches ``x [N, dim]``."""
        patches = x.shape[0]
        qkv = self.attn.qkv(self.norm1(x)).view(patches, 3, self.num_heads, self.head_dim)
        qk = rotate(qkv[:, :2].reshape(patches, 2 * self.num_heads, self.head_dim).float(), cos, sin).to(x.dtype)
        q, k = qk.split(self.num_heads, dim=1)
        attended = self.attention.forward(q, k, qkv[:, 2], metadata)
        x = self.attn.proj(attended.reshape(patches, -1), residual=x)
        return self.mlp.fc2(self.mlp.fc1(self.norm2(x)), residual=x)


class PatchMerger(nn.Module):
    """Each block of ``merge x merge`` patches: layer norm, concatenated, then a two-layer GELU MLP."""

    def __init__(self, config) -> None:
        super().__init__()
        self.width = config.embed_dim * config.spatial_merge_size ** 2
        self.ln_q = nn.LayerNorm(config.embed_dim, eps=1e-6)
        self.mlp = nn.Sequential(Linear(self.width, self.width, activation="gelu"), nn.Identity(),
                                 Linear(self.width, config.hidden_size))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``[N, embed_dim]`` patches -> ``[N / merge^2, hidden_size]`` tokens."""
        return self.mlp(self.ln_q(x).view(-1, self.width))


class VisionTower(nn.Module):
    """Packed patches ``[N, C * T * P * P]`` of a batch's images -> one decoder-wide vector per merge block."""

    def __init__(self, config, attention) -> None:
        super().__init__()
        self.config = config
        channels = config.in_channels * config.temporal_patch_size * config.patch_size ** 2
        self.patch_embed = nn.Module()
        self.patch_embed.proj = nn.Module()  # the checkpoint's Conv3d weight, used as the matrix it is
        self.patch_embed.proj.weight = nn.Parameter(torch.empty(config.embed_dim, config.in_channels,
                                                                config.temporal_patch_size, config.patch_size,
                                                                config.patch_size))
        self.channels = channels
        self.blocks = nn.ModuleList(VisionBlock(config, attention) for _ in range(config.depth))
        self.merger = PatchMerger(config)
        self.register_buffer("inv_freq", torch.empty(0), persistent=False)

    def after_load_weights(self) -> None:
        """quick_gelu folded into the MLPs; the rotary frequencies: ``head_dim / 4`` of them, shared by rows and
        columns."""
        for block in self.blocks:
            block.fold_quick_gelu()
        spatial = (self.config.embed_dim // self.config.num_heads) // 2
        theta = rope_parameters(self.config).get("rope_theta", 10000.0)
        self.inv_freq = 1.0 / (theta ** (torch.arange(0, spatial, 2, dtype=torch.float,
                                                       device=self.merger.ln_q.weight.device) / spatial))

    def rotary(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin ``[N, head_dim]`` (float32): the row's angles, then the column's, twice (rotate-half)."""
        angles = (positions.float()[..., None] * self.inv_freq).flatten(1)
        angles = torch.cat((angles, angles), dim=-1)
        return angles.cos(), angles.sin()

    def forward(self, patches: torch.Tensor, positions: torch.Tensor, metadata) -> torch.Tensor:
        """The merged image tokens ``[N / merge^2, hidden_size]``, images one after another."""
        weight = self.patch_embed.proj.weight
        x = patches.to(weight.dtype) @ weight.view(weight.shape[0], -1).T
        cos, sin = self.rotary(positions)
        for block in self.blocks:
            x = block(x, cos, sin, metadata)
        return self.merger(x)
