"""``quantization="int8"`` on CPU: every ``wde_core`` ``Linear`` but the down projections runs as an int8 GEMM.

Weights are quantized per output channel at load (symmetric, no calibration) and prepacked for oneDNN; activations
are quantized per batch as they come (symmetric, the batch's largest magnitude; passed as uint8 with zero point 128,
the form oneDNN has JIT kernels for on every int8 CPU: int8 activations fall to its reference kernel without AMX),
and oneDNN's int8 linear
(``onednn::qlinear_pointwise``: AMX-INT8 or AVX512-VNNI, int32 accumulation) dequantizes in its epilogue, with the
bias, the activation (GELU, ReLU, SiLU) or the residual add fused, writing the model's dtype. Attention, norms,
pooling and the unquantized layers stay in the dtype the user chose.

Kept in that dtype: linear layers with more inputs than outputs, the FFN down projections, whose input (the FFN
activation's output) is the heaviest-tailed; and the outlier rows of every quantized layer (``activation_scale``).
On all-MiniLM-L6-v2 over 600 wiki paragraphs, min cosine against float32: 0.970 with every layer in int8 and one
scale, 0.991 with the down projections kept, 0.9986 with the outlier rows kept too (docs/performance.md)."""

from __future__ import annotations

import functools

import torch

from wde_core.plugin_api import Linear

QMAX = 127.0
ZERO_POINT = 128  # activations go to oneDNN as uint8: the symmetric int8 value + 128
OUTLIER_FACTOR = 2.0  # rows over twice the median row's largest magnitude run in the model's dtype


def int8_supported() -> str | None:
    """Why int8 cannot run here, or ``None``: it needs torch's oneDNN int8 linear on this CPU."""
    if not torch.backends.mkldnn.is_available():
        return "torch was built without oneDNN"
    if not hasattr(torch.ops.onednn, "qlinear_pointwise"):
        return "this torch has no onednn::qlinear_pointwise"
    return None


def kept_in_dtype(layer: Linear) -> bool:
    """Whether ``layer`` stays unquantized: a down projection (more inputs than outputs)."""
    return layer.in_features > layer.out_features


def quantize_model(model: torch.nn.Module) -> dict[str, list[str]]:
    """Quantize ``model``'s ``Linear`` layers in place (the ``wde_quantization`` hook's function); returns the
    names of the layers quantized and of those kept, and refuses a model with no ``Linear`` to quantize."""
    done: dict[str, list[str]] = {"int8": [], "kept": []}
    for name, module in model.named_modules():
        if isinstance(module, Linear):
            kept = kept_in_dtype(module)
            done["kept" if kept else "int8"].append(name)
            if not kept:
                module.kernel = Int8Kernel(module)
    if not done["int8"]:
        raise ValueError(f"quantization='int8': {type(model).__name__} has no wde_core Linear layer to quantize "
                         "(its plugin's layers cannot take int8); leave quantization unset for this model")
    model.quantization_report = done
    return done


class Int8Kernel:
    """One ``Linear`` as an int8 GEMM: per-channel int8 weights prepacked for oneDNN, the dequantization, bias,
    activation and residual add in oneDNN's epilogue; one activation scale per batch, the outlier rows (BERT's
    special tokens, 3-8x the others) recomputed in the model's dtype so that they do not set it."""

    def __init__(self, layer: Linear) -> None:
        weight = layer.weight.detach().float()
        self.weight_scale = (weight.abs().amax(dim=1) / QMAX).clamp(min=1e-12)
        quantized = torch.round(weight / self.weight_scale[:, None]).clamp(-QMAX, QMAX).to(torch.int8)
        self.packed = torch.ops.onednn.qlinear_prepack(quantized, None)
        self.zero_points = torch.zeros(layer.out_features, dtype=torch.long)
        self.bias = None if layer.bias is None else layer.bias.detach().float()
        fused = layer.epilogue if layer.activation else ("none", "")  # the oneDNN post-op Linear itself fuses
        self.post_op, self.activation = (fused, None) if fused is not None else (("none", ""), layer.act)
        self.out_features = layer.out_features
        self.layer = layer  # its own path, in the model's dtype, for the outlier rows

    def __call__(self, x: torch.Tensor, residual: torch.Tensor | None = None) -> torch.Tensor:
        """``act(x @ W.T + b) + residual`` in ``x``'s dtype: the product in int8, outlier rows in ``x``'s dtype."""
        rows = x.reshape(-1, x.shape[-1])
        scale, outliers = activation_scale(rows)
        y = self.int8(x, scale, _kernels().quantize_uint8(rows, scale), residual)
        if len(outliers):
            self.redo_in_dtype(y.view(-1, self.out_features), rows, outliers, residual)
        return y

    def redo_in_dtype(self, y: torch.Tensor, rows: torch.Tensor, outliers: torch.Tensor, residual) -> None:
        """Recompute the outlier rows of ``y`` (clipped by the int8 scale) by the layer's own path, in place."""
        res = None if residual is None else residual.reshape(-1, self.out_features).index_select(0, outliers)
        y.index_copy_(0, outliers, self.layer.dense(rows.index_select(0, outliers), res))

    def int8(self, x: torch.Tensor, scale: float, quantized: torch.Tensor, residual) -> torch.Tensor:
        """The int8 GEMM of the quantized rows, dequantized by oneDNN with the bias, activation and residual."""
        if residual is not None and self.post_op[0] == "none" and self.activation is None:
            y = torch.ops.onednn.qlinear_pointwise.binary(
                quantized, scale, ZERO_POINT, self.packed, self.weight_scale, self.zero_points,
                residual.reshape(-1, self.out_features).to(x.dtype), self.bias, 1.0, 0, x.dtype, 1.0, 0, "add", 1.0,
                "none", [], "")
            return y.view(*x.shape[:-1], self.out_features)
        y = torch.ops.onednn.qlinear_pointwise(quantized, scale, ZERO_POINT, self.packed, self.weight_scale, self.zero_points,
                                               self.bias, 1.0, 0, x.dtype, self.post_op[0], [], self.post_op[1])
        y = y.view(*x.shape[:-1], self.out_features)
        if self.activation is not None:
            y = self.activation(y)
        return y if residual is None else y + residual


def activation_scale(rows: torch.Tensor) -> tuple[float, torch.Tensor]:
    """The int8 scale of ``rows`` (the largest magnitude of the ordinary rows / 127) and the outlier rows: those
    whose largest magnitude is over ``OUTLIER_FACTOR`` times the median row's (BERT's special tokens carry 3-8x;
    with 2, about 2% of all-MiniLM-L6-v2's rows)."""
    magnitudes = _kernels().row_absmax(rows)
    outlying = magnitudes > OUTLIER_FACTOR * magnitudes.median()
    ordinary = magnitudes.masked_fill(outlying, 0.0) if bool(outlying.any()) else magnitudes
    return max(float(ordinary.max()), 1e-8) / QMAX, outlying.nonzero().flatten()


class _TorchQuantizer:
    """torch's own ops where the compiled kernels are not loaded (slower: a widened copy and a quantized tensor)."""

    @staticmethod
    def row_absmax(rows: torch.Tensor) -> torch.Tensor:
        return rows.abs().amax(dim=1).float()

    @staticmethod
    def quantize_uint8(rows: torch.Tensor, scale: float) -> torch.Tensor:
        return torch.quantize_per_tensor(rows.float(), scale, ZERO_POINT, torch.quint8).int_repr()


@functools.lru_cache(maxsize=1)
def _kernels():
    """``row_absmax`` and ``quantize_uint8``: the compiled module's, else torch's."""
    from wde_cpu_kernels.attention import varlen_kernel

    kernel = varlen_kernel()
    return kernel if kernel is not None and hasattr(kernel, "quantize_uint8") else _TorchQuantizer()
