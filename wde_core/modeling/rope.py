"""Rotary position embeddings shared by every RoPE model plugin: cos/sin tables indexed by each token's
position in its sequence, computed as transformers computes them."""

from __future__ import annotations

import torch
from torch import nn

# RoPE types whose frequencies do not depend on the sequence length (computed by transformers
# for all but "default"); "dynamic" and "longrope" change with the input length and are refused.
STATIC_ROPE_TYPES = ("default", "linear", "llama3", "yarn")


def head_dim(config) -> int:
    """The attention head size: ``config.head_dim`` when given, else hidden size / heads."""
    return getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads


def rope_parameters(config) -> dict:
    """RoPE parameters: transformers >= 5 ``rope_parameters``, else ``rope_theta`` + ``rope_scaling``."""
    params = dict(getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None) or {})
    theta = getattr(config, "rope_theta", None) or getattr(config, "default_theta", None) or 10000.0
    params.setdefault("rope_theta", theta)
    return params


def rope_type(config) -> str:
    """The config's RoPE type; ``ValueError`` for one wde does not implement."""
    params = rope_parameters(config)
    kind = params.get("rope_type", params.get("type", "default"))
    if kind not in STATIC_ROPE_TYPES or any(isinstance(v, dict) for v in params.values()):
        raise ValueError(f"{config.model_type}: RoPE {params!r} is not supported by wde "
                         f"(supported rope types: {', '.join(STATIC_ROPE_TYPES)})")
    if params.get("partial_rotary_factor", 1.0) != 1.0:
        raise ValueError(f"{config.model_type}: partial rotary embeddings are not supported by wde")
    return kind


def inverse_frequencies(config) -> tuple[torch.Tensor, float]:
    """``(inv_freq [head_dim / 2], attention scaling)`` in float32, as transformers computes them."""
    kind = rope_type(config)
    if kind == "default":
        dim = head_dim(config)
        base = rope_parameters(config)["rope_theta"]
        return 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float) / dim)), 1.0
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    inv_freq, scaling = ROPE_INIT_FUNCTIONS[kind](config, torch.device("cpu"))
    return inv_freq.float(), float(scaling)


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Apply RoPE to ``x [T, heads, D]`` with ``cos``/``sin`` of shape ``[T, D]`` (rotate-half layout)."""
    cos, sin = cos[:, None, :], sin[:, None, :]
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


class RotaryTables(nn.Module):
    """cos/sin for positions ``0..max_len-1``; built by :meth:`compute` once the model is on its device."""

    def __init__(self, config, max_len: int) -> None:
        super().__init__()
        self.config, self.max_len = config, max_len
        self.register_buffer("cos", torch.empty(0), persistent=False)
        self.register_buffer("sin", torch.empty(0), persistent=False)

    def compute(self) -> None:
        """Fill the tables in float32 (as transformers does), then cast to the model's device and dtype."""
        inv_freq, scaling = inverse_frequencies(self.config)
        freqs = torch.arange(self.max_len, dtype=torch.float)[:, None] * inv_freq[None, :]
        angles = torch.cat((freqs, freqs), dim=-1)
        device, dtype = self.cos.device, self.cos.dtype
        self.cos = (angles.cos() * scaling).to(device=device, dtype=dtype)
        self.sin = (angles.sin() * scaling).to(device=device, dtype=dtype)

    def forward(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin ``[T, D]`` for each token's position."""
        return self.cos.index_select(0, positions), self.sin.index_select(0, positions)
