"""MPNet's relative position bias, and attention that adds it to the scores of packed sequences.

No core attention backend takes an additive per-head bias, so MPNet attends here: with the engine's
``eager`` backend, one sequence at a time in float32 (the reference); with any other backend, one
``scaled_dot_product_attention`` call per layer over the batch scattered into a padded block, with the
bias (and ``-inf`` on padded keys) as its additive mask. Both use only the generic ``AttentionMetadata``
fields (``seq_lens``, ``cu_seqlens``, ``max_seqlen``), so they work whatever metadata the backend builds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from wde_core.plugin_api import AttentionMetadata

NUM_BUCKETS = 32  # HF's MPNetEncoder.compute_position_bias always buckets into 32, whatever the config says
MAX_DISTANCE = 128


def relative_position_bucket(relative_position: torch.Tensor, num_buckets: int = NUM_BUCKETS,
                             max_distance: int = MAX_DISTANCE) -> torch.Tensor:
    """T5-style bucket of each ``key - query`` offset, computed as HF's ``MPNetEncoder`` does."""
    n = -relative_position
    num_buckets //= 2
    ret = (n < 0).to(torch.long) * num_buckets
    n = torch.abs(n)
    max_exact = num_buckets // 2
    is_small = n < max_exact
    val_if_large = max_exact + (torch.log(n.float() / max_exact) / math.log(max_distance / max_exact)
                                * (num_buckets - max_exact)).to(torch.long)
    val_if_large = torch.clamp(val_if_large, max=num_buckets - 1)
    return ret + torch.where(is_small, n, val_if_large)


class RelativePositionBias(nn.Module):
    """Per-head bias ``[heads, L, L]`` from the bucket of ``key - query``; positions restart per sequence."""

    def __init__(self, num_buckets: int, num_heads: int) -> None:
        super().__init__()
        if num_buckets < NUM_BUCKETS:
            raise ValueError(f"MPNet: relative_attention_num_buckets={num_buckets} is below the {NUM_BUCKETS} "
                             "buckets HF's MPNet computes")
        self.relative_attention_bias = nn.Embedding(num_buckets, num_heads)

    def forward(self, length: int) -> torch.Tensor:
        """The bias of a sequence of ``length`` tokens; any shorter sequence uses its top-left corner."""
        positions = torch.arange(length, device=self.relative_attention_bias.weight.device)
        buckets = relative_position_bucket(positions[None, :] - positions[:, None])
        return self.relative_attention_bias(buckets).permute(2, 0, 1)


@dataclass
class BiasedMetadata(AttentionMetadata):
    """The batch's boundaries plus the bias ``[heads, L, L]``; for the SDPA path, where each token sits in
    the padded block (``None`` when no sequence is padded) and the additive mask."""

    bias: torch.Tensor | None = None
    pad_index: torch.Tensor | None = None
    mask: torch.Tensor | None = None


class RelativeBiasAttention:
    """Attention with MPNet's additive bias: SDPA over the padded batch, or the per-sequence reference."""

    def __init__(self, backend) -> None:
        self.per_sequence = type(backend).__name__ == "EagerAttention"

    def prepare(self, metadata: AttentionMetadata, bias: torch.Tensor, dtype: torch.dtype) -> BiasedMetadata:
        """Once per batch: attach the bias and, for the SDPA path, the scatter index and additive mask."""
        meta = BiasedMetadata(metadata.seq_lens, metadata.cu_seqlens, metadata.max_seqlen, metadata.causal,
                              bias=bias.to(dtype))
        if metadata.causal:
            raise ValueError("MPNet attention is bidirectional; causal attention is not supported")
        if self.per_sequence:
            return meta
        if len(meta.seq_lens) == 1 or min(meta.seq_lens) == meta.max_seqlen:
            meta.mask = meta.bias[None]
            return meta
        meta.pad_index, valid_key = _padded_layout(meta)
        meta.mask = meta.bias[None].masked_fill(~valid_key[:, None, None, :], float("-inf"))
        return meta

    def forward(self, q, k, v, metadata: BiasedMetadata, scale: float | None = None) -> torch.Tensor:
        """Attend within each sequence, bias added to the scores; returns ``[T, heads, head_dim]``."""
        if self.per_sequence:
            return _attend_per_sequence(q, k, v, metadata, scale)
        batch, longest = len(metadata.seq_lens), metadata.max_seqlen
        if metadata.pad_index is None:
            qb, kb, vb = (x.view(batch, longest, x.shape[1], x.shape[2]).transpose(1, 2) for x in (q, k, v))
            out = F.scaled_dot_product_attention(qb, kb, vb, attn_mask=metadata.mask, scale=scale)
            return out.transpose(1, 2).reshape(q.shape)
        qb, kb, vb = (_pad(x, metadata) for x in (q, k, v))
        out = F.scaled_dot_product_attention(qb, kb, vb, attn_mask=metadata.mask, scale=scale)
        return out.transpose(1, 2).reshape(-1, q.shape[1], q.shape[2]).index_select(0, metadata.pad_index)


def _padded_layout(meta: BiasedMetadata) -> tuple[torch.Tensor, torch.Tensor]:
    """Each token's row in the padded ``[B * L]`` block, and which keys ``[B, L]`` are real tokens."""
    device = meta.cu_seqlens.device
    lens = torch.tensor(meta.seq_lens, device=device)
    seq_of_token = torch.repeat_interleave(torch.arange(len(meta.seq_lens), device=device), lens)
    offset_in_seq = torch.arange(int(meta.cu_seqlens[-1]), device=device) - meta.cu_seqlens[:-1].long()[seq_of_token]
    valid_key = torch.arange(meta.max_seqlen, device=device)[None, :] < lens[:, None]
    return seq_of_token * meta.max_seqlen + offset_in_seq, valid_key


def _pad(x: torch.Tensor, meta: BiasedMetadata) -> torch.Tensor:
    """Scatter packed ``[T, heads, D]`` into a zero-padded ``[B, heads, L, D]`` block."""
    batch, longest = len(meta.seq_lens), meta.max_seqlen
    padded = x.new_zeros(batch * longest, x.shape[1], x.shape[2])
    padded.index_copy_(0, meta.pad_index, x)
    return padded.view(batch, longest, x.shape[1], x.shape[2]).transpose(1, 2)


def _attend_per_sequence(q, k, v, meta: BiasedMetadata, scale: float | None) -> torch.Tensor:
    """The reference: matmul, bias, softmax, one sequence at a time, in float32."""
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    out = torch.empty_like(q)
    start = 0
    for n in meta.seq_lens:
        qs, ks, vs = (x[start:start + n].transpose(0, 1).float() for x in (q, k, v))
        scores = torch.matmul(qs, ks.transpose(1, 2)) * scale + meta.bias[:, :n, :n].float()
        out[start:start + n] = torch.matmul(torch.softmax(scores, dim=-1), vs).transpose(0, 1).to(q.dtype)
        start += n
    return out
