"""Tensor-parallel layers, sized by this process's context (rank 0 of 1 unless an executor sets one: then each
layer is its plain parent). ``shard_checkpoint(attr, tensor, rows)`` cuts a checkpoint tensor to the rank's slice."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from wde_core.modeling.layers import _POINTWISE, Linear


@dataclass(frozen=True)
class TensorParallel:
    """This process's place in a tensor-parallel group: ``rank`` of ``size``."""

    rank: int = 0
    size: int = 1
    group: Any = None

    def split(self, total: int, what: str) -> int:
        """This rank's share of ``total``; a ``ValueError`` naming ``what`` if uneven."""
        if total % self.size:
            raise ValueError(f"{what}={total} is not divisible by tensor_parallel_size={self.size}")
        return total // self.size

    def all_reduce(self, x: torch.Tensor) -> torch.Tensor:
        """Sum ``x`` over the ranks, in place."""
        if self.size > 1:
            torch.distributed.all_reduce(x, group=self.group)
        return x


_current = TensorParallel()


def tensor_parallel() -> TensorParallel:
    """The tensor-parallel context layers are built with."""
    return _current


def set_tensor_parallel(context: TensorParallel) -> TensorParallel:
    """Make ``context`` the one later layers are built with; returns the previous one."""
    global _current
    previous, _current = _current, context
    return previous


class ColumnParallelLinear(Linear):
    """``Linear`` with each fused output part (q, k, v; gate, up) split across the ranks; no communication."""

    def __init__(self, in_features: int, parts: int | Sequence[int], bias: bool = True,
                 activation: str | None = None) -> None:
        self.tp = tensor_parallel()
        self.parts = (parts,) if isinstance(parts, int) else tuple(parts)
        shares = [self.tp.split(part, "output features") for part in self.parts]
        super().__init__(in_features, sum(shares), bias=bias, activation=activation)

    def shard_checkpoint(self, attr: str, tensor: torch.Tensor, rows: slice | None):
        if self.tp.size == 1:
            return tensor, rows
        start, stop = (0, sum(self.parts)) if rows is None else (rows.start, rows.stop)
        pieces, first, offset, local = [], None, 0, 0
        for part in self.parts:
            share = part // self.tp.size
            if start <= offset and offset + part <= stop:
                begin = offset - start + self.tp.rank * share
                pieces.append(tensor[begin:begin + share])
                first = local if first is None else first
            elif start < offset + part and offset < stop:
                raise ValueError(f"a checkpoint tensor covering rows {start}:{stop} splits part {offset}:"
                                 f"{offset + part} of a column-parallel weight")
            offset, local = offset + part, local + share
        shard = torch.cat(pieces)
        return shard, slice(first, first + shard.shape[0])


class RowParallelLinear(Linear):
    """``Linear`` with its input features split across the ranks, one all-reduce; bias and residual added by rank 0."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True) -> None:
        self.tp = tensor_parallel()
        super().__init__(self.tp.split(in_features, "input features"), out_features, bias=bias)

    def shard_checkpoint(self, attr: str, tensor: torch.Tensor, rows: slice | None):
        if self.tp.size == 1 or attr != "weight":
            return tensor, rows
        begin = self.tp.rank * self.in_features
        return tensor[:, begin:begin + self.in_features], rows

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None) -> torch.Tensor:
        if self.tp.size == 1 or self.tp.rank == 0:
            y = super().forward(x, residual)
        elif self.packed_weight is not None and self.fuses(x):
            y = _POINTWISE(x.to(self.packed_weight.dtype), self.packed_weight, None, "none", [], "").to(x.dtype)
        else:
            y = F.linear(x, self.weight)
        return self.tp.all_reduce(y)


class VocabParallelEmbedding(nn.Embedding):
    """``nn.Embedding`` with its vocabulary split across the ranks (the last share padded), one all-reduce."""

    def __init__(self, num_embeddings: int, embedding_dim: int) -> None:
        tp = tensor_parallel()
        share = -(-num_embeddings // tp.size)
        super().__init__(share, embedding_dim)
        self.tp, self.start, self.vocab_size = tp, tp.rank * share, num_embeddings

    def shard_checkpoint(self, attr: str, tensor: torch.Tensor, rows: slice | None):
        if self.tp.size == 1:
            return tensor, rows
        shard = tensor[self.start:self.start + self.num_embeddings]
        padding = shard.new_zeros(self.num_embeddings - shard.shape[0], *shard.shape[1:])
        return torch.cat((shard, padding)), rows

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        if self.tp.size == 1:
            return super().forward(ids)
        local = ids - self.start
        outside = (local < 0) | (local >= self.num_embeddings)
        x = F.embedding(local.masked_fill(outside, 0), self.weight)
        return self.tp.all_reduce(x.masked_fill_(outside.unsqueeze(-1), 0.0))
