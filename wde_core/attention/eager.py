"""The reference backend: plain matmul and softmax, one sequence at a time, in float32."""

from __future__ import annotations

import torch

from wde_core.attention.base import AttentionMetadata, expand_kv_heads, position_mask


class EagerAttention:
    """Readable and slow; the yardstick the other backends are tested against."""

    def __init__(self, pipeline=None) -> None:
        pass

    def build_metadata(self, seq_lens: list[int], cu_seqlens: torch.Tensor, causal: bool) -> AttentionMetadata:
        """Record sequence boundaries."""
        return AttentionMetadata(seq_lens, cu_seqlens, max(seq_lens), causal)

    def forward(self, q, k, v, metadata: AttentionMetadata, scale: float | None = None,
                window: int | None = None) -> torch.Tensor:
        """Attend within each sequence (keys within ``window`` positions if given); returns ``[T, heads, head_dim]``."""
        scale = q.shape[-1] ** -0.5 if scale is None else scale
        k, v = expand_kv_heads(k, q.shape[1]), expand_kv_heads(v, q.shape[1])
        out = torch.empty_like(q)
        start = 0
        for n in metadata.seq_lens:
            qs, ks, vs = (x[start:start + n].transpose(0, 1).float() for x in (q, k, v))
            scores = torch.matmul(qs, ks.transpose(1, 2)) * scale
            mask = position_mask(n, metadata.causal, window, q.device)
            if mask is not None:
                scores = scores.masked_fill(~mask, float("-inf"))
            probs = torch.softmax(scores, dim=-1)
            out[start:start + n] = torch.matmul(probs, vs).transpose(0, 1).to(q.dtype)
            start += n
        return out
