"""DeBERTa's disentangled attention over a packed batch.

The relative term needs a bias per (query, key) pair and head, which no varlen backend takes, so each
layer gathers its packed ``qkv`` rows into padded blocks of similar-length sequences
(:mod:`wde_deberta.layout`), adds the content-to-position and position-to-content terms as a float mask,
and makes one SDPA call per block. The gather indices of the relative terms depend only on the sequence
lengths, so :func:`plan` builds them once per batch for every layer.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from wde_deberta.layout import Block, plan_blocks


def log_bucket_position(relative_pos: torch.Tensor, bucket_size: int, max_position: int) -> torch.Tensor:
    """HF's ``make_log_bucket_position``: exact within ``bucket_size // 2``, log-spaced beyond (same float ops)."""
    sign = torch.sign(relative_pos)
    mid = bucket_size // 2
    abs_pos = torch.where((relative_pos < mid) & (relative_pos > -mid),
                          torch.tensor(mid - 1).type_as(relative_pos), torch.abs(relative_pos))
    log_pos = torch.ceil(torch.log(abs_pos / mid) / torch.log(torch.tensor((max_position - 1) / mid))
                         * (mid - 1)) + mid
    return torch.where(abs_pos <= mid, relative_pos.type_as(log_pos), log_pos * sign).to(torch.long)


@dataclass
class RelativeSpec:
    """The relative-position geometry of a config: ``span`` rows each side, bucketing, which terms."""

    span: int
    buckets: int
    max_position: int
    c2p: bool
    p2c: bool

    @classmethod
    def from_config(cls, config) -> "RelativeSpec":
        """Read ``max_relative_positions``, ``position_buckets`` and ``pos_att_type`` as HF does."""
        max_position = getattr(config, "max_relative_positions", -1)
        if max_position < 1:
            max_position = config.max_position_embeddings
        buckets = getattr(config, "position_buckets", -1)
        kinds = set(getattr(config, "pos_att_type", None) or ())
        return cls(buckets if buckets > 0 else max_position, buckets, max_position, "c2p" in kinds, "p2c" in kinds)

    def describe(self) -> str:
        """A short summary for ``wde inspect``."""
        terms = "+".join(t for t, on in (("c2p", self.c2p), ("p2c", self.p2c)) if on) or "no relative terms"
        if self.buckets > 0:
            return f"{terms}, {self.buckets} log buckets each side up to distance {self.max_position}"
        return f"{terms}, relative distances clamped at {self.span}"

    def table(self, longest: int, device) -> tuple[torch.Tensor, torch.Tensor]:
        """Rows of the relative embeddings for distances ``-(longest-1)..longest-1``: (c2p rows, p2c rows)."""
        distance = torch.arange(-(longest - 1), longest, device=device)
        if self.buckets > 0:
            distance = log_bucket_position(distance, self.buckets, self.max_position)
        top = 2 * self.span - 1
        return (distance + self.span).clamp(0, top), (self.span - distance).clamp(0, top)


def plan(seq_lens: list[int], starts: list[int], spec: RelativeSpec, device) -> list[Block]:
    """The batch's padded blocks, each with its relative gather indices (built once per batch)."""
    blocks = plan_blocks(seq_lens, starts, device)
    longest = max(b.longest for b in blocks)
    c2p_rows, p2c_rows = spec.table(longest, device)
    for block in blocks:
        n = block.longest
        c2p, p2c = c2p_rows[longest - n:longest + n - 1], p2c_rows[longest - n:longest + n - 1]
        block.lo = int(torch.minimum(c2p, p2c).min())
        block.hi = int(torch.maximum(c2p, p2c).max()) + 1
        pair = torch.arange(n, device=device)
        offset = pair[:, None] - pair[None, :] + n - 1  # query i, key j -> distance i - j, shifted
        block.c2p_index, block.p2c_index = c2p[offset] - block.lo, p2c[offset] - block.lo
    return blocks


def relative_bias(q: torch.Tensor, k: torch.Tensor, pos_key: torch.Tensor | None, pos_query: torch.Tensor | None,
                  block: Block) -> torch.Tensor | None:
    """c2p ``q_i . pk[d(i-j)]`` plus p2c ``k_j . pq[d(j-i)]`` as ``[heads, b, L, L]`` (projections pre-scaled);
    ``q``/``k`` are ``[heads, b * L, D]``."""
    heads, b, n = q.shape[0], block.batch, block.longest
    shape = (heads, b, n, n)
    bias = None
    if pos_key is not None:
        scores = torch.bmm(q, pos_key[:, block.lo:block.hi].transpose(-1, -2)).view(heads, b, n, -1)
        bias = torch.gather(scores, -1, block.c2p_index.expand(shape))
    if pos_query is not None:
        scores = torch.bmm(k, pos_query[:, block.lo:block.hi].transpose(-1, -2)).view(heads, b, n, -1)
        term = torch.gather(scores, -1, block.p2c_index.expand(shape)).transpose(-1, -2)
        bias = term.contiguous() if bias is None else bias.add_(term)
    return bias


def attend_block(qkv: torch.Tensor, heads: int, pos_key: torch.Tensor | None, pos_query: torch.Tensor | None,
                 block: Block, scale: float) -> torch.Tensor:
    """One padded block, head-major: SDPA's batch is the heads, its heads the sequences, so the relative terms
    are plain ``bmm`` calls per head. Returns ``[n, heads * D]`` for the block's real tokens."""
    rows = qkv if block.src is None else qkv.index_select(0, block.src)
    b, n = block.batch, block.longest
    q, k, v = rows.view(b * n, 3, heads, -1).permute(1, 2, 0, 3).unbind(0)  # each [heads, b * L, D]
    bias = relative_bias(q, k, pos_key, pos_query, block)
    if block.pad_keys is not None:
        keys = block.pad_keys.view(1, b, 1, n)
        bias = ~keys if bias is None else bias.masked_fill_(keys, float("-inf"))
    q, k, v = (x.view(heads, b, n, -1) for x in (q, k, v))
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=scale)  # [heads, b, L, D]
    out = out.permute(1, 2, 0, 3).reshape(b * n, -1)
    return out if block.rows is None else out.index_select(0, block.rows)


def disentangled_attention(qkv: torch.Tensor, heads: int, pos_key: torch.Tensor | None,
                           pos_query: torch.Tensor | None, blocks: list[Block], scale: float) -> torch.Tensor:
    """Packed ``qkv`` ``[T, 3 * heads * D]`` -> ``[T, heads * D]``, block by block."""
    if blocks[0].tokens is None:
        return attend_block(qkv, heads, pos_key, pos_query, blocks[0], scale)
    out = qkv.new_empty(qkv.shape[0], qkv.shape[1] // 3)
    for block in blocks:
        out.index_copy_(0, block.tokens, attend_block(qkv, heads, pos_key, pos_query, block, scale))
    return out
