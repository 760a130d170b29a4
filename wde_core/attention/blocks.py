"""Blocks of similar-length sequences: attention on CPU without one padded block for the whole batch.

A packed batch is cut, in packed order, into runs of consecutive sequences. A run of equal lengths is
a ``[n, L]`` view of the packed tokens (no copy, no mask); a run of unequal lengths is gathered into a
``[n, L]`` block whose padded slots repeat a real token and are masked as keys. A run grows while its
padded attention area stays within ``PAD_BUDGET`` times its real area (or ``PAD_SLACK`` above it:
short sequences are not worth an attention call each). The scheduler puts each batch longest first,
so equal lengths sit side by side and most runs need no copy.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

PAD_BUDGET = 1.25
PAD_SLACK = 64 * 64


@dataclass
class Block:
    """Tokens ``start:stop`` of the packed batch as ``n`` sequences of at most ``longest`` tokens;
    ``src``/``rows``/``key_mask`` are ``None`` for a run of equal lengths (a plain view)."""

    start: int
    stop: int
    n: int
    longest: int
    src: torch.Tensor | None = None
    rows: torch.Tensor | None = None
    key_mask: torch.Tensor | None = None


def group_runs(seq_lens: list[int]) -> list[list[int]]:
    """Consecutive sequences grouped while padding each group to its longest stays within the budget."""
    groups: list[list[int]] = []
    area = longest = 0
    for length in seq_lens:
        if groups:
            top = max(longest, length)
            real = area + length * length
            if (len(groups[-1]) + 1) * top * top <= max(PAD_BUDGET * real, real + PAD_SLACK):
                groups[-1].append(length)
                area, longest = real, top
                continue
        groups.append([length])
        area, longest = length * length, length
    return groups


def plan_blocks(seq_lens: list[int], causal: bool) -> list[Block]:
    """The attention blocks of a packed batch, planned once and used by every layer."""
    blocks, start = [], 0
    for lens in group_runs(seq_lens):
        stop = start + sum(lens)
        longest = max(lens)
        block = Block(start, stop, len(lens), longest)
        if min(lens) != longest:
            lengths = torch.tensor(lens)
            first = torch.cumsum(lengths, 0) - lengths
            offsets = torch.arange(longest)
            valid = offsets[None, :] < lengths[:, None]
            block.src = torch.where(valid, first[:, None] + offsets[None, :], first[:, None]).flatten()
            block.rows = valid.flatten().nonzero().squeeze(1)
            mask = valid[:, None, None, :]
            block.key_mask = mask & torch.ones(longest, longest, dtype=torch.bool).tril() if causal else mask
        blocks.append(block)
        start = stop
    return blocks
