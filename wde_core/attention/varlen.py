"""``torch.nn.attention.varlen.varlen_attn``: torch's own flash-attention kernel over the packed batch (no
padding, no mask), CUDA in float16/bfloat16 with torch >= 2.10; needs no extra package."""

from __future__ import annotations

import functools
import inspect

import torch

from wde_core.attention.base import AttentionMetadata, SharedKeys, expand_kv_heads


@functools.cache
def varlen_attn_parameters() -> frozenset[str]:
    """The keyword arguments this torch's ``varlen_attn`` takes; empty when it has none (torch < 2.10)."""
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError:
        return frozenset()
    return frozenset(inspect.signature(varlen_attn).parameters)


def torch_varlen_available(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether ``torch_varlen`` can run here: a CUDA device, half precision and a torch with ``varlen_attn``."""
    return device.type == "cuda" and dtype in (torch.float16, torch.bfloat16) and bool(varlen_attn_parameters())


class TorchVarlenAttention:
    """Packed sequences straight into torch's varlen flash kernel (sliding windows where this torch takes
    ``window_size``); shared prefixes are left to backends with key boundaries of their own."""

    supports_position_bias = False  # assembly never picks it for a model with one, and refuses it forced
    supports_shared_prefix = False

    def __init__(self, pipeline=None) -> None:
        if pipeline is not None and not torch_varlen_available(pipeline.device, pipeline.dtype):
            raise ValueError(f"attention backend 'torch_varlen' needs a CUDA device, float16 or bfloat16 and torch >= "
                             f"2.10 (here: {pipeline.device}, {pipeline.dtype}, torch {torch.__version__})")
        from torch.nn.attention.varlen import varlen_attn

        self._varlen = varlen_attn
        self._takes = varlen_attn_parameters()

    def build_metadata(self, seq_lens: list[int], cu_seqlens: torch.Tensor, causal: bool,
                       shared: SharedKeys | None = None) -> AttentionMetadata:
        """Record sequence boundaries (``cu_seqlens`` as int32, as the kernel wants)."""
        if shared is not None:
            raise ValueError("attention backend 'torch_varlen' does not take shared prefixes")
        return AttentionMetadata(seq_lens, cu_seqlens.to(torch.int32), max(seq_lens), causal)

    def forward(self, q, k, v, metadata: AttentionMetadata, scale: float | None = None,
                window: int | None = None, bias=None) -> torch.Tensor:
        """Attend within each sequence (keys within ``window`` positions if given); returns ``[T, heads, head_dim]``."""
        if bias is not None:
            raise ValueError("attention backend 'torch_varlen' takes no position bias: use torch_sdpa or eager")
        options = {}
        if "window_size" in self._takes:  # torch >= 2.11: causal is the window (-1, 0)
            left = -1 if window is None else window
            options["window_size"] = (left, 0 if metadata.causal else left)
        elif window is not None:
            raise ValueError(f"this torch's varlen_attn ({torch.__version__}) takes no sliding window")
        else:
            options["is_causal"] = metadata.causal
        if scale is not None:
            if "scale" not in self._takes:
                raise ValueError(f"this torch's varlen_attn ({torch.__version__}) takes no softmax scale")
            options["scale"] = scale
        if k.shape[1] != q.shape[1] and "enable_gqa" in self._takes:
            options["enable_gqa"] = True
        elif k.shape[1] != q.shape[1]:
            k, v = expand_kv_heads(k, q.shape[1]), expand_kv_heads(v, q.shape[1])
        cu = metadata.cu_seqlens
        return self._varlen(q, k, v, cu, cu, metadata.max_seqlen, metadata.max_seqlen, **options)
