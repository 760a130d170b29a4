"""DeBERTa's disentangled attention over a packed batch.

The relative term needs a bias per (query, key) pair and head, which no varlen backend takes, so each
layer scatters its packed ``q``/``k``/``v`` into a ``[B, heads, L, head_dim]`` block (``L`` the batch's
longest sequence; positions restart at 0 in every sequence, as in HF's right-padded batch), adds the
content-to-position and position-to-content terms as a float mask, and makes one SDPA call. Everything
that depends only on the sequence lengths (scatter index, padded keys, relative-position gather
indices) is built once per batch in :class:`PaddedLayout` and shared by every layer.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F


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


@dataclass
class PaddedLayout:
    """Where each packed token sits in the ``[B, L]`` block, which keys are padding, and the gather
    indices ``[L, L]`` into the used window ``lo:hi`` of the relative-embedding rows."""

    batch: int
    longest: int
    pad_index: torch.Tensor | None
    pad_keys: torch.Tensor | None
    c2p_index: torch.Tensor
    p2c_index: torch.Tensor
    lo: int
    hi: int

    @classmethod
    def build(cls, seq_lens: list[int], spec: RelativeSpec, device) -> "PaddedLayout":
        """Once per batch, from the sequence lengths."""
        batch, longest = len(seq_lens), max(seq_lens)
        pad_index = pad_keys = None
        if min(seq_lens) != longest:
            lens = torch.tensor(seq_lens, device=device)
            valid = torch.arange(longest, device=device)[None, :] < lens[:, None]
            pad_index = valid.flatten().nonzero().squeeze(1)
            pad_keys = ~valid[:, None, None, :]
        c2p_rows, p2c_rows = spec.table(longest, device)
        lo = int(torch.minimum(c2p_rows, p2c_rows).min())
        hi = int(torch.maximum(c2p_rows, p2c_rows).max()) + 1
        pair = torch.arange(longest, device=device)
        offset = pair[:, None] - pair[None, :] + longest - 1  # query i, key j -> distance i - j, shifted
        return cls(batch, longest, pad_index, pad_keys, c2p_rows[offset] - lo, p2c_rows[offset] - lo, lo, hi)

    def pad(self, x: torch.Tensor) -> torch.Tensor:
        """``[T, heads, D]`` packed -> ``[B, heads, L, D]`` (zeros where padded)."""
        if self.pad_index is not None:
            block = x.new_zeros(self.batch * self.longest, x.shape[1], x.shape[2])
            x = block.index_copy_(0, self.pad_index, x)
        return x.view(self.batch, self.longest, x.shape[1], x.shape[2]).transpose(1, 2)

    def unpad(self, x: torch.Tensor) -> torch.Tensor:
        """``[B, heads, L, D]`` -> ``[T, heads * D]``, padding dropped."""
        x = x.transpose(1, 2).reshape(self.batch * self.longest, -1)
        return x if self.pad_index is None else x.index_select(0, self.pad_index)


def relative_bias(qb: torch.Tensor, kb: torch.Tensor, pos_key: torch.Tensor | None, pos_query: torch.Tensor | None,
                  layout: PaddedLayout) -> torch.Tensor | None:
    """c2p ``q_i . pk[d(i-j)]`` plus p2c ``k_j . pq[d(j-i)]`` as ``[B, heads, L, L]`` (projections pre-scaled)."""
    shape = (qb.shape[0], qb.shape[1], layout.longest, layout.longest)
    bias = None
    if pos_key is not None:
        scores = torch.matmul(qb, pos_key[:, layout.lo:layout.hi].transpose(-1, -2))
        bias = torch.gather(scores, -1, layout.c2p_index.expand(shape))
    if pos_query is not None:
        scores = torch.matmul(kb, pos_query[:, layout.lo:layout.hi].transpose(-1, -2))
        term = torch.gather(scores, -1, layout.p2c_index.expand(shape)).transpose(-1, -2)
        bias = term.contiguous() if bias is None else bias.add_(term)
    return bias


def disentangled_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, pos_key: torch.Tensor | None,
                           pos_query: torch.Tensor | None, layout: PaddedLayout, scale: float) -> torch.Tensor:
    """Packed ``q``/``k``/``v`` ``[T, heads, D]`` -> ``[T, heads * D]``: one SDPA call with the relative bias."""
    qb, kb, vb = layout.pad(q), layout.pad(k), layout.pad(v)
    bias = relative_bias(qb, kb, pos_key, pos_query, layout)
    if layout.pad_keys is not None:
        bias = ~layout.pad_keys if bias is None else bias.masked_fill_(layout.pad_keys, float("-inf"))
    out = F.scaled_dot_product_attention(qb, kb, vb, attn_mask=bias, scale=scale)
    return layout.unpad(out)
