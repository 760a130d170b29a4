"""Layers shared by model plugins: a linear layer that fuses its activation or residual add into
the matrix product on CPU (oneDNN epilogues), with the plain PyTorch path everywhere else."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from transformers.activations import ACT2FN

# HF activation name -> (oneDNN post-op, algorithm)
_EPILOGUES = {
    "gelu": ("gelu", "none"),
    "gelu_new": ("gelu", "tanh"),
    "gelu_pytorch_tanh": ("gelu", "tanh"),
    "relu": ("relu", ""),
    "silu": ("swish", ""),
}
_POINTWISE = getattr(getattr(torch.ops, "mkldnn", None), "_linear_pointwise", None)
_FUSED_DTYPES = (torch.float32, torch.bfloat16)


def _can_fuse(x: torch.Tensor, weight: torch.Tensor) -> bool:
    return (_POINTWISE is not None and x.device.type == "cpu" and x.dtype in _FUSED_DTYPES
            and weight.dtype == x.dtype and x.dim() == 2 and torch.backends.mkldnn.is_available())


class Linear(nn.Linear):
    """``nn.Linear`` with an optional activation (an HF ``hidden_act`` name) and residual add.

    ``forward(x, residual=None)`` returns ``act(x @ W.T + b) + residual``; on CPU the activation
    or the residual add runs inside the matrix product instead of as another pass over memory.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, activation: str | None = None):
        super().__init__(in_features, out_features, bias=bias)
        self.activation = activation
        self.act = ACT2FN[activation] if activation else None
        self.epilogue = _EPILOGUES.get(activation) if activation else None

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None) -> torch.Tensor:
        fuse = _can_fuse(x, self.weight)
        if self.act is None:
            if residual is not None and fuse:
                return _POINTWISE.binary(x, residual, self.weight, self.bias, "add")
            y = F.linear(x, self.weight, self.bias)
        elif fuse and self.epilogue is not None:
            y = _POINTWISE(x, self.weight, self.bias, self.epilogue[0], [], self.epilogue[1])
        else:
            y = self.act(F.linear(x, self.weight, self.bias))
        return y if residual is None else y + residual
