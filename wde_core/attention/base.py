"""What every attention backend receives about the packed batch."""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch


@dataclass
class SharedKeys:
    """Which keys each sequence attends to when sequences of a batch share a prefix (causal only): sequence
    ``s``'s keys are rows ``key_index[cu_seqlens_k[s]:cu_seqlens_k[s + 1]]`` of the packed ``k``/``v``, the
    shared prefix's rows first; its queries are its own rows, aligned to the last keys (query ``r`` of
    ``q_len`` sees keys ``j <= r + k_len - q_len``)."""

    key_index: torch.Tensor
    seq_lens_k: list[int]
    cu_seqlens_k: torch.Tensor
    max_seqlen_k: int

    @classmethod
    def of(cls, key_ranges: list[list[tuple[int, int]]]) -> "SharedKeys":
        """From each sequence's key row ranges ``[(start, stop), ...]`` in packed order."""
        lens = [sum(stop - start for start, stop in ranges) for ranges in key_ranges]
        index = torch.cat([torch.arange(start, stop) for ranges in key_ranges for start, stop in ranges])
        cu = torch.zeros(len(lens) + 1, dtype=torch.int32)
        torch.cumsum(torch.tensor(lens), 0, out=cu[1:])
        return cls(index, lens, cu, max(lens))

    def gather(self, x: torch.Tensor) -> torch.Tensor:
        """Each sequence's keys (or values) laid end to end: ``[sum(seq_lens_k), kv_heads, head_dim]``."""
        return x.index_select(0, self.key_index.to(x.device))


@dataclass
class AttentionMetadata:
    """Sequence boundaries of a packed batch and whether attention is causal; ``shared``: the keys of
    sequences that attend to a prefix held once in the batch (backends with ``supports_shared_prefix``)."""

    seq_lens: list[int]
    cu_seqlens: torch.Tensor
    max_seqlen: int
    causal: bool
    shared: SharedKeys | None = None


def expand_kv_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """Repeat grouped key/value heads (``[T, kv_heads, D]``) to ``num_heads``."""
    groups = num_heads // x.shape[1]
    return x if groups == 1 else x.repeat_interleave(groups, dim=1)


def aligned_mask(q_len: int, k_len: int, causal: bool, window: int | None, device=None) -> torch.Tensor | None:
    """May query ``i`` of ``q_len`` see key ``j`` of ``k_len``, queries aligned to the last keys: ``[q_len, k_len]``."""
    if q_len == k_len:
        return position_mask(q_len, causal, window, device)
    distance = (torch.arange(q_len, device=device)[:, None] + (k_len - q_len)) - torch.arange(k_len, device=device)
    reach = k_len if window is None else window
    return (distance <= reach) & (distance >= (0 if causal else -reach))


@functools.lru_cache(maxsize=8)  # one tensor shared by every caller: never modify it
def position_mask(n: int, causal: bool, window: int | None, device=None) -> torch.Tensor | None:
    """May query ``i`` see key ``j`` (``j <= i`` if causal; ``|i - j| <= window``): ``[n, n]``, None if all."""
    if not causal and (window is None or window >= n - 1):
        return None
    distance = torch.arange(n, device=device)[:, None] - torch.arange(n, device=device)[None, :]
    reach = n if window is None else window
    return (distance <= reach) & (distance >= (0 if causal else -reach))
