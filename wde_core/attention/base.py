"""What every attention backend receives about the packed batch."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class AttentionMetadata:
    """Sequence boundaries of a packed batch and whether attention is causal."""

    seq_lens: list[int]
    cu_seqlens: torch.Tensor
    max_seqlen: int
    causal: bool


def expand_kv_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """Repeat grouped key/value heads (``[T, kv_heads, D]``) to ``num_heads``."""
    groups = num_heads // x.shape[1]
    return x if groups == 1 else x.repeat_interleave(groups, dim=1)
