"""Qwen2-VL's vision tower over packed images (the skeleton Qwen2.5-VL's and Qwen3-VL's towers build on): patches of
``temporal_patch_size x patch_size x patch_size`` pixels (as transformers' ``Qwen2VLImageProcessor`` flattens them, 2x2
merge blocks side by side) through a linear patch embedding, pre-norm layers with fused QKV, 2D rotary positions (height
and width, each over a quarter of the head) and wde's varlen attention (bidirectional, within each image), then the
merger: each 2x2 block of patches concatenated, normed and projected to the decoder's width, one token per block.

The skeleton (patch embedding, rotary positions, attention, the merger, optional windows) is shared with Qwen2.5-VL's
tower (:mod:`wde_vision_language.window_vision`), which overrides the norms, the MLP and the widths' config fields."""

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
    """``x + proj(attn(norm1(x)))``, then ``x + mlp(norm2(x))``, queries and keys rotated by position (Qwen2-VL's:
    layer norms, a two-layer MLP)."""

    def __init__(self, config, attention, width: int) -> None:
        super().__init__()
        self.num_heads, self.head_dim = config.num_heads, width // config.num_heads
        self.attention = attention
        self.norm1, self.norm2 = self.norm(width), self.norm(width)
        self.attn = nn.Module()
        self.attn.qkv = Linear(width, 3 * width)
        self.attn.proj = Linear(width, width)
        self.mlp = self.build_mlp(config, width)

    @staticmethod
    def norm(width: int) -> nn.Module:
        """The block's pre-norm."""
        return nn.LayerNorm(width, eps=1e-6)

    def build_mlp(self, config, width: int) -> nn.Module:
        """``fc1``/``fc2``; quick_gelu as silu on fc1 scaled by 1.702 (fc2 by 1 / 1.702), folded in once loaded: the
        activation then fuses into fc1's matrix product on CPU instead of two passes over ``[patches, 4 * dim]``."""
        self.quick_gelu = config.hidden_act == "quick_gelu"
        mlp, hidden = nn.Module(), int(width * config.mlp_ratio)
        mlp.fc1 = Linear(width, hidden, activation="silu" if self.quick_gelu else config.hidden_act)
        mlp.fc2 = Linear(hidden, width)
        return mlp

    def feed_forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        """``residual + fc2(act(fc1(x)))``."""
        return self.mlp.fc2(self.mlp.fc1(x), residual=residual)

    def after_load_weights(self) -> None:
        """Scale the loaded fc1 by 1.702 and fc2 by 1 / 1.702: silu in fc1 is then quick_gelu."""
        if self.quick_gelu:
            self.mlp.fc1.weight.data.mul_(QUICK_GELU)
            self.mlp.fc1.bias.data.mul_(QUICK_GELU)
            self.mlp.fc2.weight.data.div_(QUICK_GELU)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, metadata) -> torch.Tensor:
        """One block over the packed patches ``x [N, dim]``, attending within ``metadata``'s sequences."""
        patches = x.shape[0]
        qkv = self.attn.qkv(self.norm1(x)).view(patches, 3, self.num_heads, self.head_dim)
        qk = rotate(qkv[:, :2].reshape(patches, 2 * self.num_heads, self.head_dim).float(), cos, sin).to(x.dtype)
        q, k = qk.split(self.num_heads, dim=1)
        attended = self.attention.forward(q, k, qkv[:, 2], metadata)
        x = self.attn.proj(attended.reshape(patches, -1), residual=x)
        return self.feed_forward(self.norm2(x), residual=x)


class PatchMerger(nn.Module):
    """Each block of ``merge x merge`` patches: normed, concatenated, then a two-layer GELU MLP."""

    def __init__(self, config, width: int, out_width: int, norm: nn.Module) -> None:
        super().__init__()
        self.width = width * config.spatial_merge_size ** 2
        self.ln_q = norm
        self.mlp = nn.Sequential(Linear(self.width, self.width, activation="gelu"), nn.Identity(),
                                 Linear(self.width, out_width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``[N, width]`` patches -> ``[N / merge^2, out_width]`` tokens."""
        return self.mlp(self.ln_q(x).view(-1, self.width))


class VisionTower(nn.Module):
    """Packed patches ``[N, C * T * P * P]`` of a batch's images -> one decoder-wide vector per merge block
    (Qwen2-VL's: every block attends over its whole image)."""

    block_class = VisionBlock

    def __init__(self, config, attention) -> None:
        super().__init__()
        self.config = config
        width, out_width = self.widths(config)
        self.patch_embed = nn.Module()
        self.patch_embed.proj = nn.Module()  # the checkpoint's Conv3d weight, used as the matrix it is
        self.patch_embed.proj.weight = nn.Parameter(torch.empty(width, config.in_channels,
                                                                config.temporal_patch_size, config.patch_size,
                                                                config.patch_size))
        self.head_dim = width // config.num_heads
        self.blocks = nn.ModuleList(self.block_class(config, attention, width) for _ in range(config.depth))
        self.merger = PatchMerger(config, width, out_width, self.block_class.norm(width))
        self.register_buffer("inv_freq", torch.empty(0), persistent=False)

    @staticmethod
    def widths(config) -> tuple[int, int]:
        """``(the tower's width, the decoder's)``: Qwen2-VL's ``embed_dim`` and ``hidden_size``."""
        return config.embed_dim, config.hidden_size

    def full_attention(self, index: int) -> bool:
        """Whether block ``index`` attends over whole images (all of Qwen2-VL's do)."""
        return True

    def map_checkpoint_name(self, name: str):
        """``(parameter, rows)`` of a checkpoint name under the tower's prefix."""
        return name, None

    def after_load_weights(self) -> None:
        """The blocks' load-time folds; the rotary frequencies: ``head_dim / 4`` of them, shared by rows and
        columns."""
        for block in self.blocks:
            block.after_load_weights()
        spatial = self.head_dim // 2
        theta = rope_parameters(self.config).get("rope_theta", 10000.0)
        self.inv_freq = 1.0 / (theta ** (torch.arange(0, spatial, 2, dtype=torch.float,
                                                       device=self.merger.mlp[0].weight.device) / spatial))

    def rotary(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin ``[N, head_dim]`` (float32): the row's angles, then the column's, twice (rotate-half)."""
        angles = (positions.float()[..., None] * self.inv_freq).flatten(1)
        angles = torch.cat((angles, angles), dim=-1)
        return angles.cos(), angles.sin()

    def forward(self, patches: torch.Tensor, positions: torch.Tensor, metadata, windows=None) -> torch.Tensor:
        """The merged image tokens ``[N / merge^2, out_width]``, images one after another. ``windows`` (a
        :class:`~wde_vision_language.window_vision.VisionWindows`): the patches run in its window order, the blocks that
        are not full-attention ones attend within each window, and the merged tokens come back in image order."""
        weight = self.patch_embed.proj.weight
        x = patches.to(weight.dtype) @ weight.view(weight.shape[0], -1).T
        if windows is not None:
            x, positions = x[windows.patch_order], positions[windows.patch_order]
        cos, sin = self.rotary(positions)
        for index, block in enumerate(self.blocks):
            full = windows is None or self.full_attention(index)
            x = block(x, cos, sin, metadata if full else windows.metadata)
        merged = self.merger(x)
        return merged if windows is None else merged[windows.restore]
