"""``torch.nn.functional.scaled_dot_product_attention`` over the packed batch. On GPU, sequences are
scattered into one ``[B, heads, L, D]`` block for the attention call, masked where padded (and causal);
on CPU, blocks of similar-length sequences (:mod:`wde_core.attention.blocks`) avoid most of the padding,
the mask and the copies."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from wde_core.attention.base import AttentionMetadata
from wde_core.attention.blocks import Block, plan_blocks


@dataclass
class SdpaMetadata(AttentionMetadata):
    """Adds where each token sits in the padded block, and the mask (``None`` when not needed)."""

    pad_index: torch.Tensor | None = None
    mask: torch.Tensor | None = None
    blocks: list[Block] | None = None


class SdpaAttention:
    """One fused SDPA call per layer for the whole batch."""

    def __init__(self, pipeline=None) -> None:
        self.blocked = pipeline is None or getattr(pipeline, "device", torch.device("cpu")).type == "cpu"

    def build_metadata(self, seq_lens: list[int], cu_seqlens: torch.Tensor, causal: bool) -> SdpaMetadata:
        """Precompute the scatter index and mask once per batch."""
        meta = SdpaMetadata(seq_lens, cu_seqlens, max(seq_lens), causal)
        batch, longest = len(seq_lens), meta.max_seqlen
        if batch == 1 or min(seq_lens) == longest:
            return meta
        if self.blocked:
            meta.blocks = plan_blocks(seq_lens, causal)
            return meta
        lens = torch.tensor(seq_lens)
        seq_of_token = torch.repeat_interleave(torch.arange(batch), lens)
        offset_in_seq = torch.arange(int(lens.sum())) - cu_seqlens[:-1].long()[seq_of_token]
        meta.pad_index = seq_of_token * longest + offset_in_seq
        valid_key = torch.arange(longest)[None, :] < lens[:, None]
        mask = valid_key[:, None, None, :]
        if causal:
            mask = mask & torch.ones(longest, longest, dtype=torch.bool).tril()[None, None]
        meta.mask = mask
        return meta

    def forward(self, q, k, v, metadata: SdpaMetadata, scale: float | None = None) -> torch.Tensor:
        """Attend within each sequence; returns ``[T, heads, head_dim]``."""
        gqa = k.shape[1] != q.shape[1]
        if metadata.blocks is not None:
            return self._blocked(q, k, v, metadata, scale, gqa)
        if metadata.pad_index is None:
            batch, longest = len(metadata.seq_lens), metadata.max_seqlen
            qb, kb, vb = (x.view(batch, longest, x.shape[1], x.shape[2]).transpose(1, 2) for x in (q, k, v))
            out = F.scaled_dot_product_attention(qb, kb, vb, is_causal=metadata.causal, scale=scale, enable_gqa=gqa)
            return out.transpose(1, 2).reshape(q.shape)
        qb, kb, vb = (self._pad(x, metadata) for x in (q, k, v))
        out = F.scaled_dot_product_attention(qb, kb, vb, attn_mask=metadata.mask, scale=scale, enable_gqa=gqa)
        out = out.transpose(1, 2).reshape(-1, q.shape[1], q.shape[2])
        return out.index_select(0, metadata.pad_index)

    @staticmethod
    def _blocked(q, k, v, metadata: SdpaMetadata, scale: float | None, gqa: bool) -> torch.Tensor:
        out = torch.empty_like(q)
        for b in metadata.blocks:
            qs, ks, vs = q[b.start:b.stop], k[b.start:b.stop], v[b.start:b.stop]
            if b.src is not None:
                qs, ks, vs = (x.index_select(0, b.src) for x in (qs, ks, vs))
            qb, kb, vb = (x.view(b.n, b.longest, x.shape[1], x.shape[2]).transpose(1, 2) for x in (qs, ks, vs))
            causal = metadata.causal and b.key_mask is None
            o = F.scaled_dot_product_attention(qb, kb, vb, attn_mask=b.key_mask, is_causal=causal, scale=scale,
                                               enable_gqa=gqa).transpose(1, 2).reshape(-1, q.shape[1], q.shape[2])
            out[b.start:b.stop] = o if b.rows is None else o.index_select(0, b.rows)
        return out

    @staticmethod
    def _pad(x: torch.Tensor, metadata: SdpaMetadata) -> torch.Tensor:
        batch, longest = len(metadata.seq_lens), metadata.max_seqlen
        padded = x.new_zeros(batch * longest, x.shape[1], x.shape[2])
        padded.index_copy_(0, metadata.pad_index, x)
        return padded.view(batch, longest, x.shape[1], x.shape[2]).transpose(1, 2)
