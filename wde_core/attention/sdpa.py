"""``torch.nn.functional.scaled_dot_product_attention`` over the packed batch. On GPU, sequences are
scattered into one ``[B, heads, L, D]`` block for the attention call, masked where padded (and causal);
on CPU, blocks of similar-length sequences (:mod:`wde_core.attention.blocks`) avoid most of the padding,
the mask and the copies."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from wde_core.attention.base import AttentionMetadata, SharedKeys, expand_kv_heads, position_mask
from wde_core.attention.bias import PositionBias, dense, offset_span
from wde_core.attention.blocks import Block, plan_blocks

BMM_MAX_LEN = 160  # longer bf16 blocks use flash SDPA (the bmm path was erratic above this length here)


@dataclass
class SdpaMetadata(AttentionMetadata):
    """Adds where each token sits in the padded block, and the mask (``None`` when not needed); with shared
    prefixes, where each gathered key sits and each query's distance to each key (query position - key position)."""

    pad_index: torch.Tensor | None = None
    mask: torch.Tensor | None = None
    blocks: list[Block] | None = None
    key_pad_index: torch.Tensor | None = None
    distance: torch.Tensor | None = None


class SdpaAttention:
    """One fused SDPA call per layer for the whole batch."""

    supports_shared_prefix = True
    supports_position_bias = True

    def __init__(self, pipeline=None) -> None:
        self.blocked = pipeline is None or getattr(pipeline, "device", torch.device("cpu")).type == "cpu"

    def build_metadata(self, seq_lens: list[int], cu_seqlens: torch.Tensor, causal: bool,
                       shared: SharedKeys | None = None) -> SdpaMetadata:
        """Precompute the scatter index and mask once per batch."""
        meta = SdpaMetadata(seq_lens, cu_seqlens, max(seq_lens), causal, shared)
        if shared is not None:
            return _plan_shared(meta, shared)
        batch, longest = len(seq_lens), meta.max_seqlen
        if batch == 1 or min(seq_lens) == longest:
            return meta
        if self.blocked:
            meta.blocks = plan_blocks(seq_lens, causal)
            return meta
        lens = torch.tensor(seq_lens)
        meta.pad_index = _pad_index(seq_lens, longest)
        valid_key = torch.arange(longest)[None, :] < lens[:, None]
        mask = valid_key[:, None, None, :]
        if causal:
            mask = mask & torch.ones(longest, longest, dtype=torch.bool).tril()[None, None]
        meta.mask = mask
        return meta

    def forward(self, q, k, v, metadata: SdpaMetadata, scale: float | None = None,
                window: int | None = None, bias: PositionBias | None = None) -> torch.Tensor:
        """Attend within each sequence (keys within ``window`` positions if given, ``bias`` added to the scaled
        scores, built per block); returns ``[T, heads, head_dim]``."""
        gqa = k.shape[1] != q.shape[1]
        if metadata.shared is not None:
            return _shared_forward(q, k, v, metadata, scale, window, gqa, bias)
        if metadata.blocks is not None:
            return self._blocked(q, k, v, metadata, scale, gqa, window, bias)
        batch, longest = len(metadata.seq_lens), metadata.max_seqlen
        if metadata.pad_index is None:
            qb, kb, vb = (x.view(batch, longest, x.shape[1], x.shape[2]).transpose(1, 2) for x in (q, k, v))
            mask, causal = _masks(None, longest, metadata.causal, window, q.device)
            return _attend(qb, kb, vb, mask, causal, scale, gqa, bias).transpose(1, 2).reshape(q.shape)
        qb, kb, vb = (self._pad(x, metadata) for x in (q, k, v))
        mask = _masks(metadata.mask, longest, False, window, q.device)[0]
        out = _attend(qb, kb, vb, mask, False, scale, gqa, bias)
        out = out.transpose(1, 2).reshape(-1, q.shape[1], q.shape[2])
        return out.index_select(0, metadata.pad_index)

    @staticmethod
    def _blocked(q, k, v, metadata: SdpaMetadata, scale: float | None, gqa: bool, window: int | None,
                 bias: PositionBias | None) -> torch.Tensor:
        out = torch.empty_like(q)
        for b in metadata.blocks:
            qs, ks, vs = q[b.start:b.stop], k[b.start:b.stop], v[b.start:b.stop]
            if b.src is not None:
                qs, ks, vs = (x.index_select(0, b.src) for x in (qs, ks, vs))
            qb, kb, vb = (x.view(b.n, b.longest, x.shape[1], x.shape[2]).transpose(1, 2) for x in (qs, ks, vs))
            mask, causal = _masks(b.key_mask, b.longest, metadata.causal, window, q.device)
            o = _attend(qb, kb, vb, mask, causal, scale, gqa, bias).transpose(1, 2).reshape(-1, q.shape[1], q.shape[2])
            out[b.start:b.stop] = o if b.rows is None else o.index_select(0, b.rows)
        return out

    @staticmethod
    def _pad(x: torch.Tensor, metadata: SdpaMetadata) -> torch.Tensor:
        return _pad_rows(x, metadata.pad_index, len(metadata.seq_lens), metadata.max_seqlen)


def _pad_index(lens: list[int], longest: int) -> torch.Tensor:
    """Where each packed row goes in a ``[len(lens) * longest]`` padded block."""
    lengths = torch.tensor(lens)
    seq_of_row = torch.repeat_interleave(torch.arange(len(lens)), lengths)
    starts = torch.cumsum(lengths, 0) - lengths
    return seq_of_row * longest + torch.arange(int(lengths.sum())) - starts[seq_of_row]


def _plan_shared(meta: SdpaMetadata, keys: SharedKeys) -> SdpaMetadata:
    """Padded blocks of queries and of their gathered keys, and each query's distance to each key (queries
    aligned to the last keys); the mask is made from it in every forward, where the window is known."""
    q_lens, k_lens = torch.tensor(meta.seq_lens), torch.tensor(keys.seq_lens_k)
    meta.pad_index = _pad_index(meta.seq_lens, meta.max_seqlen)
    meta.key_pad_index = _pad_index(keys.seq_lens_k, keys.max_seqlen_k)
    query_pos = torch.arange(meta.max_seqlen)[None, :] + (k_lens - q_lens)[:, None]
    distance = query_pos[:, :, None] - torch.arange(keys.max_seqlen_k)[None, None, :]
    meta.distance = distance.masked_fill(torch.arange(keys.max_seqlen_k) >= k_lens[:, None, None], -(1 << 30))
    meta.mask = (meta.distance >= 0 if meta.causal else meta.distance > -(1 << 30))[:, None]
    return meta


def _shared_forward(q, k, v, meta: SdpaMetadata, scale, window: int | None, gqa: bool,
                    bias: PositionBias | None) -> torch.Tensor:
    """Attention of sequences some of whose keys are a prefix held in another sequence's rows."""
    keys, batch = meta.shared, len(meta.seq_lens)
    qb = _pad_rows(q, meta.pad_index, batch, meta.max_seqlen)
    kb, vb = (_pad_rows(keys.gather(x), meta.key_pad_index, batch, keys.max_seqlen_k) for x in (k, v))
    mask = meta.mask.to(q.device)
    if window is not None:
        mask = mask & (meta.distance.abs() <= window)[:, None].to(q.device)
    if bias is not None:  # offset j - i is -distance; padded keys are masked whatever their bias
        m = offset_span(bias, keys.max_seqlen_k)
        offsets = (-meta.distance).clamp(-m, m).to(q.device) + m
        table = bias.by_offset(m).to(q.device, q.dtype)
        mask = table[:, offsets].transpose(0, 1).masked_fill(~mask, float("-inf"))
    out = F.scaled_dot_product_attention(qb, kb, vb, attn_mask=mask, scale=scale, enable_gqa=gqa)
    return out.transpose(1, 2).reshape(-1, q.shape[1], q.shape[2]).index_select(0, meta.pad_index.to(q.device))


def _pad_rows(x: torch.Tensor, index: torch.Tensor, batch: int, longest: int) -> torch.Tensor:
    """Packed rows ``[T, heads, D]`` scattered to a zero-padded ``[batch, heads, longest, D]`` block."""
    padded = x.new_zeros(batch * longest, x.shape[1], x.shape[2])
    padded.index_copy_(0, index.to(x.device), x)
    return padded.view(batch, longest, x.shape[1], x.shape[2]).transpose(1, 2)


def _attend(q, k, v, mask, causal: bool, scale: float | None, gqa: bool, bias: PositionBias | None = None):
    """Attention of one ``[n, heads, L, D]`` block: batched matmuls for a short bf16 block on CPU, else SDPA; with
    ``bias``, SDPA with the block's bias as its additive mask (``-inf`` where ``mask`` or causality hides a key)."""
    if bias is not None:
        keep = position_mask(q.shape[2], True, None, q.device) if causal else mask
        added = dense(bias, q.shape[2], k.shape[2], q.device).to(q.dtype)
        mask, causal = (added if keep is None else torch.where(keep, added, float("-inf"))), False
    elif q.dtype == torch.bfloat16 and q.device.type == "cpu" and q.shape[2] <= BMM_MAX_LEN:
        return _bmm_attention(q, k, v, mask, causal, scale)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal, scale=scale, enable_gqa=gqa)


def _bmm_attention(q, k, v, mask, causal: bool, scale: float | None) -> torch.Tensor:
    """Attention of ``[n, heads, L, D]`` blocks as two batched matrix products around a softmax. In bf16 on CPU,
    at head size 32, it was 1.4-3x faster than flash SDPA for blocks of up to 160 tokens (MiniLM in bf16: 1.08x
    end to end); in fp32 it was erratic, so fp32 keeps flash SDPA."""
    n, heads, length, dim = q.shape
    q, k, v = (expand_kv_heads(x, heads).reshape(n * heads, length, dim) for x in (q, k, v))
    alpha = dim ** -0.5 if scale is None else scale
    if causal:
        mask = position_mask(length, True, None, q.device)
    if mask is None:
        scores = torch.bmm(q, k.transpose(1, 2)).mul_(alpha)
    else:
        bias = torch.zeros(mask.shape, dtype=q.dtype, device=q.device).masked_fill_(~mask, float("-inf"))
        bias = bias.expand(n, heads, *mask.shape[-2:]).reshape(n * heads, *mask.shape[-2:])
        scores = torch.baddbmm(bias.expand(n * heads, length, length), q, k.transpose(1, 2), alpha=alpha)
    return torch.bmm(torch.softmax(scores, dim=-1), v).view(n, heads, length, dim)


def _masks(key_mask, n: int, causal: bool, window: int | None, device) -> tuple[torch.Tensor | None, bool]:
    """SDPA's ``attn_mask`` and ``is_causal`` for ``n``-token blocks: ``key_mask`` (causal already) windowed."""
    band = None if window is None else position_mask(n, causal, window, device)
    if band is None:
        return key_mask, causal and key_mask is None
    return (band if key_mask is None else key_mask & band), False
