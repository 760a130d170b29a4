"""Padded blocks for attention over a packed batch.

The relative-position terms need a bias per (query, key) pair, so attention runs on padded
``[b, heads, L, head_dim]`` blocks. Padding a whole batch to its longest sequence wastes most of the
work when lengths vary (one 512-token pair among 150-token ones), so the sequences are sorted by length
and split greedily into blocks whose padded attention area stays within ``PAD_BUDGET`` times (or
``PAD_SLACK`` above) the real one.
Everything here depends only on the sequence lengths: it is planned once per batch and shared by every
layer. Positions restart at 0 in every sequence, as in HF's right-padded batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

PAD_BUDGET = 1.25  # a block's padded attention area (n * L^2) at most this times its sequences' own (sum l^2),
PAD_SLACK = 64 * 64  # or at most this much above it: short sequences are not worth a block (and its calls) each


@dataclass
class Block:
    """Sequences padded together into ``[b, L]`` slots: ``tokens`` (their packed tokens; ``None``: the whole
    batch as it is), ``src`` (the packed token of every slot, padded slots repeating a real one whose key is
    masked; ``None``: the packed tokens are the slots), ``rows`` (the real slots, in ``tokens`` order),
    ``pad_keys`` ``[b, 1, 1, L]``, and the relative gather indices ``[L, L]`` into the rows ``lo:hi`` of the
    relative embeddings."""

    batch: int
    longest: int
    tokens: torch.Tensor | None
    src: torch.Tensor | None
    rows: torch.Tensor | None
    pad_keys: torch.Tensor | None
    c2p_index: torch.Tensor | None = None
    p2c_index: torch.Tensor | None = None
    lo: int = 0
    hi: int = 0


def group_lengths(seq_lens: list[int]) -> list[list[int]]:
    """Sequence indices, longest first, split where padding to the block's longest would exceed the budget."""
    order = sorted(range(len(seq_lens)), key=lambda i: -seq_lens[i])
    groups: list[list[int]] = []
    area = 0
    for i in order:
        n = seq_lens[i]
        padded = (len(groups[-1]) + 1) * seq_lens[groups[-1][0]] ** 2 if groups else 0
        if groups and padded <= max(PAD_BUDGET * (area + n * n), area + n * n + PAD_SLACK):
            groups[-1].append(i)
            area += n * n
        else:
            groups.append([i])
            area = n * n
    return groups


def plan_blocks(seq_lens: list[int], starts: list[int], device) -> list[Block]:
    """The padded blocks of a batch (``starts``: each sequence's first packed token)."""
    if min(seq_lens) == max(seq_lens):  # the packed tokens are already a [B, L] block
        return [Block(len(seq_lens), seq_lens[0], None, None, None, None)]
    return [make_block(group, seq_lens, starts, device) for group in group_lengths(seq_lens)]


def make_block(group: list[int], seq_lens: list[int], starts: list[int], device) -> Block:
    """One block: where its padded slots come from, which are real, which keys to mask."""
    lens = torch.tensor([seq_lens[i] for i in group], device=device)
    first = torch.tensor([starts[i] for i in group], device=device)
    longest = int(lens[0])
    offsets = torch.arange(longest, device=device)
    valid = offsets[None, :] < lens[:, None]
    src = torch.where(valid, first[:, None] + offsets[None, :], first[:, None]).flatten()
    rows = valid.flatten().nonzero().squeeze(1)
    pad_keys = None if int(lens[-1]) == longest else ~valid[:, None, None, :]
    return Block(len(group), longest, src.index_select(0, rows), src, rows, pad_keys)
