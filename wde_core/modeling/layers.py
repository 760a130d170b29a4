"""Layers shared by model plugins: a linear layer that fuses its activation or residual add into
the matrix product on CPU (oneDNN epilogues), with the plain PyTorch path everywhere else; a LayerNorm whose work a
plugin may take over; RMSNorm."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from transformers.activations import ACT2FN

from wde_core.plugins.entries import CpuPolicy

# HF activation name -> (oneDNN post-op, algorithm)
_EPILOGUES = {"gelu": ("gelu", "none"), "gelu_new": ("gelu", "tanh"), "gelu_pytorch_tanh": ("gelu", "tanh"),
              "relu": ("relu", ""), "silu": ("swish", "")}
_POINTWISE = getattr(getattr(torch.ops, "mkldnn", None), "_linear_pointwise", None)
_REORDER = getattr(getattr(torch.ops, "mkldnn", None), "_reorder_linear_weight", None)
PREPACK_ROWS = 4096  # the batch size oneDNN lays the weight out for (the layout serves every size, 1 row included)


def _cpu_rows(x: torch.Tensor) -> bool:
    """Whether ``x`` is 2-D rows on the CPU of a torch with oneDNN's fused linear."""
    return _POINTWISE is not None and x.device.type == "cpu" and x.dim() == 2 and torch.backends.mkldnn.is_available()


class Linear(nn.Linear):
    """``nn.Linear`` with an optional activation (an HF ``hidden_act`` name) and residual add:
    ``forward(x, residual=None)`` is ``act(x @ W.T + b) + residual``, fused into the matrix product on CPU.
    Call :meth:`prepack` after the weights are loaded (and again if they change device or dtype). A quantizer
    (``wde_select_quantization``'s) may set ``kernel``: a callable ``(x, residual)`` that then does the work."""

    kernel = None

    def __init__(self, in_features: int, out_features: int, bias: bool = True, activation: str | None = None):
        super().__init__(in_features, out_features, bias=bias)
        self.activation = activation
        self.act = ACT2FN[activation] if activation else None
        self.epilogue = _EPILOGUES.get(activation) if activation else None
        self.packed_weight: torch.Tensor | None = None
        self.wide_bias: torch.Tensor | None = None
        self.widened = False  # a bf16 weight prepacked as float32 (``CpuPolicy.widens_bf16_gemms``)

    def prepack(self, cpu: CpuPolicy | None = None) -> None:
        """Keep a copy of the weight in the blocked layout oneDNN's matrix product reads, for the CPU path, so
        that no call reorders it (bf16 bge-base shape 1.12x end to end over a plain oneDNN copy, which was itself
        13% faster in fp32 and 35% in bf16 than the strided weight); the worker calls it once the weights are final.
        ``cpu`` is the pipeline's :class:`CpuPolicy` (the ``wde_get_cpu_policy`` hook's; by default float32 alone).
        A bf16 weight is widened to float32 where ``cpu.widens_bf16_gemms`` (a bge-base shape 1.47x on an Intel Xeon
        without AMX: oneDNN's bf16 GEMMs ran at 173 GFLOP/s there, float32's at 288; on an AVX2-only CPU oneDNN has no
        bf16 product at all). A weight oneDNN cannot take (``cpu.onednn_takes``) is not packed: torch's path runs it."""
        cpu = cpu or CpuPolicy()
        self.packed_weight, self.wide_bias, self.widened = None, None, False
        weight = self.weight.detach()
        if weight.dtype == torch.bfloat16 and (self.act is None or self.epilogue) and cpu.widens_bf16_gemms:
            weight = weight.float()
        if not (_cpu_rows(weight) and cpu.onednn_takes(weight.dtype)):
            return
        self.widened = weight.dtype != self.weight.dtype
        if self.widened:
            self.wide_bias = None if self.bias is None else self.bias.detach().float()
        self.packed_weight = _REORDER(weight, PREPACK_ROWS) if _REORDER is not None else weight.to_mkldnn()

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None) -> torch.Tensor:
        if self.kernel is not None:
            return self.kernel(x, residual)
        return self.dense(x, residual)

    def dense(self, x: torch.Tensor, residual: torch.Tensor | None = None) -> torch.Tensor:
        """The layer in the weights' own dtype: what ``forward`` runs when no ``kernel`` is set."""
        if self.widened and x.dtype == torch.bfloat16 and _cpu_rows(x):  # through the widened float32 weight
            return self.fused(x.float(), self.packed_weight, self.wide_bias,
                              residual if residual is None else residual.float()).to(x.dtype)
        fuse = self.fuses(x)
        weight = self.packed_weight if fuse and self.packed_weight is not None else self.weight
        if self.act is None and residual is None and weight is self.weight:
            return F.linear(x, self.weight, self.bias)
        if fuse:
            return self.fused(x, weight, self.bias, residual)
        y = F.linear(x, self.weight, self.bias) if self.act is None else self.act(F.linear(x, self.weight, self.bias))
        return y if residual is None else y + residual

    def fuses(self, x: torch.Tensor) -> bool:
        """Whether ``x`` goes through oneDNN: CPU rows in the weight's dtype, packed (the CPU policy took the dtype) or
        in float32."""
        return _cpu_rows(x) and x.dtype == self.weight.dtype and (
            self.packed_weight is not None or x.dtype == torch.float32)

    def fused(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
              residual: torch.Tensor | None) -> torch.Tensor:
        """oneDNN's product on the prepacked ``weight`` with the activation or residual add as its epilogue."""
        if self.act is None:
            if residual is not None:
                return _POINTWISE.binary(x, residual, weight, bias, "add")
            return _POINTWISE(x, weight, bias, "none", [], "")
        if self.epilogue is None:
            y = self.act(F.linear(x, self.weight, self.bias))
        else:
            y = _POINTWISE(x, weight, bias, self.epilogue[0], [], self.epilogue[1])
        return y if residual is None else y + residual


class LayerNorm(nn.LayerNorm):
    """``nn.LayerNorm`` (same parameters and checkpoint names) whose work a plugin may take over, as ``Linear``'s: a
    quantizer (the ``wde_select_quantization`` hook's function) may set ``kernel``, a callable ``(rows, weight, bias, eps)``
    over the 2-D rows ``[N, size]`` returning them normalized in their dtype (wde-cpu-kernels sets its compiled one)."""

    kernel = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.kernel is None or self.weight is None:
            return super().forward(x)
        return self.kernel(x.reshape(-1, x.shape[-1]), self.weight, self.bias, self.eps).view(x.shape)


class RMSNorm(nn.Module):
    """Root-mean-square norm over the last dimension, computed in float32 as HF does: Llama/Qwen style
    (``weight * norm(x)`` in the input's dtype, weight initialised to 1), or with ``unit_offset`` Gemma style
    (``norm(x) * (1 + weight)`` in float32, then cast; weight initialised to 0)."""

    def __init__(self, size: int, eps: float, unit_offset: bool = False) -> None:
        super().__init__()
        self.eps, self.unit_offset = eps, unit_offset
        self.weight = nn.Parameter(torch.zeros(size) if unit_offset else torch.ones(size))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Normalize the last dimension of ``x``."""
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        if self.unit_offset:
            return (h * (1.0 + self.weight.float())).type_as(x)
        return self.weight * h.to(x.dtype)
