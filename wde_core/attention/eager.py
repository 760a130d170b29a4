"""The reference backend: plain matmul and softmax, one sequence at a time, in float32."""

from __future__ import annotations

import torch

from wde_core.attention.base import AttentionMetadata, SharedKeys, aligned_mask, expand_kv_heads
from wde_core.attention.bias import PositionBias, dense


class EagerAttention:
    """Readable and slow; the yardstick the other backends are tested against."""

    supports_shared_prefix = True
    supports_position_bias = True

    def __init__(self, pipeline=None) -> None:
        pass

    def build_metadata(self, seq_lens: list[int], cu_seqlens: torch.Tensor, causal: bool,
                       shared: SharedKeys | None = None) -> AttentionMetadata:
        """Record sequence boundaries (and the keys of sequences that share a prefix)."""
        return AttentionMetadata(seq_lens, cu_seqlens, max(seq_lens), causal, shared)

    def forward(self, q, k, v, metadata: AttentionMetadata, scale: float | None = None,
                window: int | None = None, bias: PositionBias | None = None) -> torch.Tensor:
        """Attend within each sequence (keys within ``window`` positions if given, ``bias`` added to the scaled
        scores); returns ``[T, heads, head_dim]``."""
        scale = q.shape[-1] ** -0.5 if scale is None else scale
        k, v = expand_kv_heads(k, q.shape[1]), expand_kv_heads(v, q.shape[1])
        keys = metadata.shared
        k_lens = metadata.seq_lens if keys is None else keys.seq_lens_k
        if keys is not None:
            k, v = keys.gather(k), keys.gather(v)
        out = torch.empty_like(q)
        start = k_start = 0
        for n, k_len in zip(metadata.seq_lens, k_lens):
            qs = q[start:start + n].transpose(0, 1).float()
            ks, vs = (x[k_start:k_start + k_len].transpose(0, 1).float() for x in (k, v))
            scores = torch.matmul(qs, ks.transpose(1, 2)) * scale
            if bias is not None:
                scores = scores + dense(bias, n, k_len, q.device)
            mask = aligned_mask(n, k_len, metadata.causal, window, q.device)
            if mask is not None:
                scores = scores.masked_fill(~mask, float("-inf"))
            probs = torch.softmax(scores, dim=-1)
            out[start:start + n] = torch.matmul(probs, vs).transpose(0, 1).to(q.dtype)
            start, k_start = start + n, k_start + k_len
        return out
