"""Position biases described, not materialized: what a model passes to ``forward(..., bias=...)`` so that the
backend adds ``bias(i, j, head)`` to each scaled score (query position ``i``, key position ``j``, both counted
from a sequence's first key) before the softmax. A description is a function of the offset ``j - i`` alone, so
every backend gets it as ``by_offset(m)``: the bias of offsets ``-m .. m`` per head (``[heads, 2m + 1]``), beyond
which it no longer changes; backends that need a dense ``[heads, q_len, k_len]`` block build it per block
(``dense``), ``cpu_varlen`` reads the offsets' row inside its kernel."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch


def relative_position_bucket(offset: torch.Tensor, bidirectional: bool, num_buckets: int,
                             max_distance: int) -> torch.Tensor:
    """T5's bucket of each offset ``j - i`` (MPNet's is T5's bidirectional rule): exact below half the buckets,
    logarithmic up to ``max_distance``; bidirectional rules give later keys the upper half of the buckets."""
    buckets = torch.zeros_like(offset)
    if bidirectional:
        num_buckets //= 2
        buckets += (offset > 0).long() * num_buckets
        distance = offset.abs()
    else:
        distance = -torch.clamp(offset, max=0)
    exact = num_buckets // 2
    scaled = torch.log(distance.float() / exact) / math.log(max_distance / exact) * (num_buckets - exact)
    large = torch.clamp(exact + scaled.to(torch.long), max=num_buckets - 1)
    return buckets + torch.where(distance < exact, distance, large)


@dataclass(frozen=True)
class BucketedBias:
    """T5/MPNet relative bias: ``table[bucket(j - i), head]`` with ``table`` ``[num_buckets, heads]``."""

    table: torch.Tensor
    max_distance: int = 128
    bidirectional: bool = True

    @property
    def reach(self) -> int:
        """Offsets past which the bias no longer changes (every bucket rule saturates at ``max_distance``)."""
        return self.max_distance

    def by_offset(self, m: int) -> torch.Tensor:
        """The bias of offsets ``-m .. m`` per head, float32 ``[heads, 2m + 1]``."""
        offsets = torch.arange(-m, m + 1, device=self.table.device)
        buckets = relative_position_bucket(offsets, self.bidirectional, self.table.shape[0], self.max_distance)
        return self.table.float()[buckets].t().contiguous()


@dataclass(frozen=True)
class AlibiBias:
    """ALiBi (Press et al., 2022): ``-slopes[head] * |i - j|``; the paper's causal form, mirrored for encoders."""

    slopes: torch.Tensor

    reach = None  # linear in the offset: it never saturates

    def by_offset(self, m: int) -> torch.Tensor:
        """The bias of offsets ``-m .. m`` per head, float32 ``[heads, 2m + 1]``."""
        offsets = torch.arange(-m, m + 1, device=self.slopes.device).abs().float()
        return (-self.slopes.float()[:, None] * offsets[None, :]).contiguous()


PositionBias = BucketedBias | AlibiBias


def alibi_slopes(heads: int) -> torch.Tensor:
    """The paper's slopes: ``2^(-8 k / n)`` for ``k = 1 .. n``, ``n`` a power of two; other head counts take the
    closest power of two's and every other one of twice that (the authors' code)."""
    def geometric(n: int) -> list[float]:
        return [2 ** (-8 * k / n) for k in range(1, n + 1)]

    power = 2 ** math.floor(math.log2(heads))
    extra = geometric(2 * power)[0::2][:heads - power]
    return torch.tensor(geometric(power) + extra, dtype=torch.float32)


def offset_span(bias: PositionBias, longest: int) -> int:
    """The ``m`` of ``by_offset`` a batch needs: its longest sequence's reach, capped where the bias saturates."""
    return longest - 1 if bias.reach is None else min(longest - 1, bias.reach)


def dense(bias: PositionBias, q_len: int, k_len: int, device=None) -> torch.Tensor:
    """The bias of one block, float32 ``[heads, q_len, k_len]``, queries aligned to the last keys."""
    m = offset_span(bias, k_len)
    table = bias.by_offset(m).to(device)
    offsets = torch.arange(k_len, device=device)[None, :] - torch.arange(k_len - q_len, k_len, device=device)[:, None]
    return table[:, offsets.clamp(-m, m) + m]
