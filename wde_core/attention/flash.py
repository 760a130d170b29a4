"""``flash_attn_varlen_func``: packed sequences straight into the kernel; CUDA, fp16/bf16 only."""

from __future__ import annotations

import torch

from wde_core.attention.base import AttentionMetadata, SharedKeys


def flash_attn_available() -> bool:
    """Whether the ``flash_attn`` package imports (it needs a CUDA build)."""
    try:
        import flash_attn  # noqa: F401
    except Exception:  # noqa: BLE001 - missing, or built for another torch/CUDA
        return False
    return True


class FlashAttention:
    """The varlen flash-attention kernel; imported lazily so CPU installs never need it."""

    supports_position_bias = False  # assembly never picks it for a model with one, and refuses it forced
    supports_shared_prefix = True  # the kernel takes key boundaries of their own; causal aligns to the last keys

    def __init__(self, pipeline=None) -> None:
        if pipeline is not None:
            if pipeline.device.type != "cuda":
                raise ValueError(f"attention backend 'flash_attn' needs a CUDA device, not {pipeline.device}")
            if pipeline.dtype not in (torch.float16, torch.bfloat16):
                raise ValueError(f"attention backend 'flash_attn' needs float16 or bfloat16, not {pipeline.dtype}")
        try:
            from flash_attn import flash_attn_varlen_func
        except ImportError as exc:
            raise ImportError("attention backend 'flash_attn' needs the flash-attn package "
                              "(pip install 'wde-core[flash-attn]')") from exc
        self._varlen = flash_attn_varlen_func

    def build_metadata(self, seq_lens: list[int], cu_seqlens: torch.Tensor, causal: bool,
                       shared: SharedKeys | None = None) -> AttentionMetadata:
        """Record sequence boundaries (``cu_seqlens`` as int32, as the kernel wants)."""
        return AttentionMetadata(seq_lens, cu_seqlens.to(torch.int32), max(seq_lens), causal, shared)

    def forward(self, q, k, v, metadata: AttentionMetadata, scale: float | None = None,
                window: int | None = None, bias=None) -> torch.Tensor:
        """Attend within each sequence (keys within ``window`` positions if given); returns ``[T, heads, head_dim]``."""
        if bias is not None:
            raise ValueError("attention backend 'flash_attn' takes no position bias: use torch_sdpa or eager")
        cu, longest = metadata.cu_seqlens, metadata.max_seqlen
        cu_k, longest_k, keys = cu, longest, metadata.shared
        if keys is not None:  # flash-attn >= 2.1 aligns the causal mask to the last keys, as SharedKeys asks
            k, v, cu_k, longest_k = keys.gather(k), keys.gather(v), keys.cu_seqlens_k.to(cu.device), keys.max_seqlen_k
        reach = (-1, -1) if window is None else (window, 0 if metadata.causal else window)
        return self._varlen(q, k, v, cu, cu_k, longest, longest_k, softmax_scale=scale, causal=metadata.causal,
                            window_size=reach)
