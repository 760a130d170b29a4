"""Qwen2.5-VL's vision tower: Qwen2-VL's skeleton (:mod:`wde_vision_language.vision`) with RMSNorms, a gated SiLU
MLP with biases (gate and up fused into one projection), the widths in ``hidden_size`` / ``intermediate_size`` /
``out_hidden_size``, and window attention: an image's merged 2x2 blocks are grouped into windows of
``window_size // patch_size // spatial_merge_size`` blocks a side (partial at the right and bottom edges), the
patches reordered window by window (transformers' ``get_vision_window_index``), the blocks outside
``fullatt_block_indexes`` attending within each window (the windows are just more variable-length sequences for
the attention backend), and the merged tokens put back in image order after the merger."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from transformers.activations import ACT2FN

from wde_core.plugin_api import Linear, RMSNorm
from wde_vision_language.vision import VisionBlock, VisionTower


@dataclass
class VisionWindows:
    """A batch's windows: ``patch_order`` (image order -> window order, ``[N]``), ``restore`` (window order -> image
    order of the merged tokens, ``[N / merge^2]``) and the attention ``metadata`` of one sequence per window."""

    patch_order: torch.Tensor
    restore: torch.Tensor
    metadata: Any


def window_units(vision_config) -> int | None:
    """Merged blocks per window side of a Qwen2.5-VL tower; ``None`` for a tower without windows (Qwen2-VL)."""
    size = getattr(vision_config, "window_size", None)
    if size is None or getattr(vision_config, "fullatt_block_indexes", None) is None:
        return None
    return max(1, size // vision_config.spatial_merge_size // vision_config.patch_size)


def window_order(grids: list[tuple[int, int, int]], merge: int, units: int) -> tuple[torch.Tensor, list[int]]:
    """The merged blocks of all images (frames after frames) in window order, and each window's block count: windows
    row-major over each frame, the blocks of a window row-major, as ``get_vision_window_index`` orders them."""
    order, sizes, offset = [], [], 0
    for t, h, w in grids:
        rows, cols = h // merge, w // merge
        r, c = torch.meshgrid(torch.arange(rows), torch.arange(cols), indexing="ij")
        per_side = -(-cols // units)
        window = ((r // units) * per_side + c // units).flatten()
        frame = torch.argsort(window, stable=True)  # row-major within each window
        counts = torch.bincount(window).tolist()
        for f in range(t):
            order.append(frame + offset + f * rows * cols)
            sizes.extend(n for n in counts if n)
        offset += t * rows * cols
    return torch.cat(order), sizes


def build_windows(grids: list[tuple[int, int, int]], merge: int, units: int, attention) -> VisionWindows:
    """The batch's :class:`VisionWindows`, on the CPU."""
    blocks, sizes = window_order(grids, merge, units)
    unit = merge * merge
    patch_order = (blocks[:, None] * unit + torch.arange(unit)).flatten()
    lens = [n * unit for n in sizes]
    cu_seqlens = torch.zeros(len(lens) + 1, dtype=torch.int32)
    torch.cumsum(torch.tensor(lens), 0, out=cu_seqlens[1:])
    return VisionWindows(patch_order, torch.argsort(blocks), attention.build_metadata(lens, cu_seqlens, causal=False))


class WindowVisionBlock(VisionBlock):
    """Qwen2.5-VL's block: RMSNorms, ``down(act(gate(x)) * up(x))`` with biases, gate and up fused."""

    @staticmethod
    def norm(width: int) -> nn.Module:
        """The block's pre-norm."""
        return RMSNorm(width, 1e-6)

    def build_mlp(self, config, width: int) -> nn.Module:
        """``gate_up_proj`` (the checkpoint's gate rows, then its up rows) and ``down_proj``."""
        self.intermediate_size, self.act = config.intermediate_size, ACT2FN[config.hidden_act]
        mlp = nn.Module()
        mlp.gate_up_proj = Linear(width, 2 * config.intermediate_size)
        mlp.down_proj = Linear(config.intermediate_size, width)
        return mlp

    def feed_forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        """``residual + down(act(gate) * up)``."""
        gate, up = self.mlp.gate_up_proj(x).split(self.intermediate_size, dim=-1)
        return self.mlp.down_proj(self.act(gate) * up, residual=residual)

    def after_load_weights(self) -> None:
        """Nothing to fold."""


class WindowVisionTower(VisionTower):
    """Qwen2.5-VL's tower: window attention except in ``fullatt_block_indexes``; ``forward`` takes the batch's
    :class:`VisionWindows`."""

    block_class = WindowVisionBlock

    def __init__(self, config, attention) -> None:
        super().__init__(config, attention)
        self.full_blocks = frozenset(config.fullatt_block_indexes)

    @staticmethod
    def widths(config) -> tuple[int, int]:
        """``(hidden_size, out_hidden_size)``."""
        return config.hidden_size, config.out_hidden_size

    def full_attention(self, index: int) -> bool:
        """Whether block ``index`` is one of ``fullatt_block_indexes``."""
        return index in self.full_blocks

    def map_checkpoint_name(self, name: str):
        """``blocks.N.mlp.gate_proj`` / ``up_proj`` -> rows of ``gate_up_proj``; other names as they are."""
        for k, projection in enumerate(("gate_proj", "up_proj")):
            marker = f".mlp.{projection}."
            if marker in name:
                size = self.config.intermediate_size
                return name.replace(marker, ".mlp.gate_up_proj."), slice(k * size, (k + 1) * size)
        return name, None
