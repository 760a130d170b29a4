"""What every attention backend receives about the packed batch."""

from __future__ import annotations

import functools
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


@functools.lru_cache(maxsize=8)  # one tensor shared by every caller: never modify it
def position_mask(n: int, causal: bool, window: int | None, device=None) -> torch.Tensor | None:
    """May query ``i`` see key ``j`` (``j <= i`` if causal; ``|i - j| <= window``): ``[n, n]``, None if all."""
    if not causal and (window is None or window >= n - 1):
        return None
    distance = torch.arange(n, device=device)[:, None] - torch.arange(n, device=device)[None, :]
    reach = n if window is None else window
    return (distance <= reach) & (distance >= (0 if causal else -reach))
