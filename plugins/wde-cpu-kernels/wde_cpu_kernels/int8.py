"""``quantization="int8"`` on CPU: every ``wde_core`` ``Linear`` runs as an int8 GEMM.

Weights are quantized per output channel at load (symmetric, no calibration) and prepacked for oneDNN; activations
are quantized as they come (symmetric; passed as uint8 with zero point 128, the form oneDNN has JIT kernels for on
every int8 CPU: int8 activations fall to its reference kernel without AMX; as int8 where the CPU has AMX-INT8, whose
kernels then compensate no zero point, 1.045x end to end on a Xeon), and oneDNN's int8 linear
(``onednn::qlinear_pointwise``: AMX-INT8 or AVX512-VNNI, int32 accumulation) runs the product. Attention, norms and
pooling stay in the dtype the user chose.

- Layers with more outputs than inputs (QKV, attention output, FFN in): one activation scale per batch, the batch's
  largest ordinary magnitude; oneDNN dequantizes in its epilogue with the bias, the activation (GELU, ReLU, SiLU)
  or the residual add fused, writing the model's dtype. The outlier rows (``quantize_batch_uint8``: BERT's special
  tokens; rows over 2x the median row's largest magnitude, 3x for a layer with an activation, the FFN in) are
  recomputed in the model's dtype so that they do not set the scale; a layer that adds the residual (the attention
  output) has none: every row at one scale measured as accurate.
- Down projections (more inputs than outputs; the FFN activation's output is the heaviest-tailed input): one scale
  per token (``PerTokenInt8Kernel``), which oneDNN's fused epilogue does not take: the GEMM writes float32, the
  compiled ``dequantize_rows`` applies each row's scale, the bias and the residual in one pass. Their input, the FFN
  in's output, is written in bfloat16 whatever the model's dtype (it is only read to be quantized: half the bytes).

On all-MiniLM-L6-v2 over 600 wiki paragraphs, min cosine against float32: 0.970 with every layer at one scale per
batch, 0.9986 with the down projections kept in the model's dtype, 0.9970-0.9975 with them per token (a
cross-encoder's Spearman 0.992 against 0.993 kept; docs/performance.md)."""

from __future__ import annotations

import contextlib
import functools
import math
import os
import sys

import torch

from wde_core.plugin_api import LayerNorm, Linear

from wde_cpu_kernels.cpu import amx_allowed, cpu_flags, int8_dot_product, onednn_takes, splits_256_bit_vectors
from wde_cpu_kernels.torch_quantizer import QMAX, ZERO_POINT, TorchQuantizer

OUTLIER_FACTOR = 2.0  # rows over twice the median row's largest magnitude run in the model's dtype
FFN_OUTLIER_FACTOR = 3.0  # for layers with an activation (FFN in): 1.4% of MiniLM's rows instead of 10%, 1.085x
# layers that add the residual in their epilogue (attention output projections: their inputs are weighted means of
# value rows) take every row at one scale: on MiniLM's 2,000 paragraphs 0.7% of their rows were over twice the
# median, and leaving them in int8 moved the min cosine against float32 0.99617 -> 0.99645 and the mean error 0.001476
# -> 0.001497, and saved 318 bf16 recomputes an encode: 1.07x end to end in one A/B (Zen 5; such A/Bs drift 1-7%)
RESIDUAL_OUTLIER_FACTOR = math.inf
# oneDNN builds a primitive for every new row count (0.4-1.3 ms each on a Xeon; a first pass over 2,000 paragraphs met
# 387 new ones, 9% of its time): the int8 GEMMs' rows are padded to a multiple of ROW_MULTIPLE (zero rows, dropped
# from the output) and the outlier rows' count to one of OUTLIER_MULTIPLE (the last row repeated), so that batches
# reuse the primitives of earlier ones
ROW_MULTIPLE = 64
OUTLIER_MULTIPLE = 16
FLOAT_BELOW_ROWS = 112  # float_below_rows: fewer rows run in the model's dtype on CPUs without an int8 dot product
ALWAYS_FLOAT = sys.maxsize  # ... and every batch where the CPU splits 256-bit vectors in halves (AMD Zen, Zen+)
FLOAT_BELOW_ROWS_VARIABLE = "WDE_INT8_FLOAT_BELOW_ROWS"  # sets float_below_rows whatever the CPU


def int8_supported() -> str | None:
    """Why int8 cannot run here, or ``None``: it needs torch's oneDNN int8 linear on this CPU."""
    if not torch.backends.mkldnn.is_available():
        return "torch was built without oneDNN"
    if not hasattr(torch.ops.onednn, "qlinear_pointwise"):
        return "this torch has no onednn::qlinear_pointwise"
    return None


@functools.lru_cache(maxsize=1)
def signed_activations() -> bool:
    """Whether activations go to oneDNN as int8 (zero point 0) instead of uint8 + 128: where the CPU has AMX-INT8
    and oneDNN's ISA cap admits it (``cpu.amx_allowed``), whose kernels take them with no zero point to compensate
    (1.04x per GEMM at bge-base's shapes on a Xeon). Without AMX, int8 activations fall to oneDNN's reference kernel
    (about 1,000x slower on a Zen 5), so uint8 it is there."""
    amx_int8 = {"amx_int8", "amx_tile"} <= cpu_flags() and bool(getattr(torch.cpu, "_is_amx_tile_supported", bool)())
    return amx_int8 and amx_allowed()


def weight_levels() -> float:
    """The largest int8 weight magnitude: 127, or 63 where the CPU has no int8 dot product (``int8_dot_product``).
    There oneDNN multiplies the uint8 activations by the int8 weights with ``vpmaddubsw``, whose int16 sum of two
    products saturates past 32,767 (255 x 127 x 2 = 64,770; 255 x 63 x 2 = 32,130): one MiniLM-sized layer came out up
    to 0.58 off the int8 arithmetic with 127. 7-bit weights are NNCF's "overflow fix" for the same CPUs (OpenVINO's
    static int8)."""
    return QMAX if int8_dot_product() else 63.0


def float_below_rows() -> int:
    """Batches of fewer rows than this run a quantized layer in the model's dtype, by the layer's own weights (kept for
    the outlier rows): ``WDE_INT8_FLOAT_BELOW_ROWS`` where set (0: int8 at every size), else ``cpu_float_below_rows``."""
    value = os.environ.get(FLOAT_BELOW_ROWS_VARIABLE, "").strip()
    if not value:
        return cpu_float_below_rows()
    if not value.isdigit():
        raise ValueError(f"{FLOAT_BELOW_ROWS_VARIABLE}={value!r}: expected a whole number of rows (0: int8 at every "
                         "batch size; unset: this CPU's rule)")
    return int(value)


def cpu_float_below_rows() -> int:
    """This CPU's ``float_below_rows``: 0 with an int8 dot product (oneDNN's brgemm kernels take the weights prepacked;
    not measured); on AVX2 CPUs ``FLOAT_BELOW_ROWS``, as oneDNN's ``gemm:jit`` packs the weights on every call (0.19-1.4
    ms a layer; on a Zen 3 with all-MiniLM-L6-v2 int8 ran 0.91x float32 at 96 rows, 1.07x at 112, 1.51x at 512);
    ``ALWAYS_FLOAT`` where the CPU splits 256-bit vectors in halves (``splits_256_bit_vectors``; on a Zen 1 int8 ran
    0.28x float32 at 16 rows, 0.5x at 240-448, 0.93x at 912, 0.9x on the 2,000 wiki paragraphs)."""
    if int8_dot_product():
        return 0
    return ALWAYS_FLOAT if splits_256_bit_vectors() else FLOAT_BELOW_ROWS


def float_rows_note(dtype: str) -> str:
    """What ``float_below_rows`` does here, for ``wde inspect``'s reason (empty where every batch runs int8)."""
    rows, variable = float_below_rows(), FLOAT_BELOW_ROWS_VARIABLE
    if rows >= ALWAYS_FLOAT:
        why = variable if os.environ.get(variable) else ("this CPU splits 256-bit vectors in halves: int8 GEMMs ran "
                                                         f"0.3-0.93x float32 on an AMD Zen; {variable}=0 forces int8")
        return f"; every batch in {dtype} ({why})"
    why = variable if os.environ.get(variable) else "oneDNN packs the int8 weights on every call on this CPU"
    return f"; batches of fewer than {rows} rows in {dtype} ({why})" if rows else ""


def zero_point() -> int:
    """The activations' zero point: 0 for int8 activations (AMX-INT8), 128 for uint8 ones."""
    return 0 if signed_activations() else ZERO_POINT


def per_token(layer: Linear) -> bool:
    """Whether ``layer`` takes one activation scale per token: a down projection (more inputs than outputs) with no
    activation of its own."""
    return layer.in_features > layer.out_features and not layer.activation


def in_a_block(name: str) -> bool:
    """Whether the module at ``name`` lies inside a numbered block (``layers.3.qkv``: a transformer layer of a
    ``ModuleList``, run on every token), not in a head outside them (``pooler.dense``, ``classifier``, a projection)."""
    return any(part.isdigit() for part in name.split(".")[:-1])


def quantize_model(model: torch.nn.Module) -> dict[str, list[str]]:
    """Quantize the ``Linear`` layers of ``model``'s transformer blocks in place (the ``wde_select_quantization`` hook's
    function); returns the names of the layers quantized per batch and per token, and of those kept in the model's
    dtype: the heads outside the blocks, which run on one row per sequence (a cross-encoder's pooler and classifier
    in int8 took its Spearman against float32 from 0.994 to 0.990 and saved no time); and of the ``LayerNorm`` layers
    given the compiled kernel (``layer_norm``: bfloat16 models, where the compiled module is loaded). Refuses a model
    with no block ``Linear`` to quantize."""
    done: dict[str, list[str]] = {"int8": [], "int8 per token": [], "kept": [], "compiled LayerNorm": []}
    compiled_norm = hasattr(_kernels(), "layer_norm")
    for name, module in model.named_modules():
        if isinstance(module, LayerNorm) and compiled_norm and module.weight is not None \
                and module.weight.dtype == torch.bfloat16:  # in bf16 1.5x torch's (0.60 vs 0.91 ms, 4,096 x 768, Xeon);
            module.kernel = compiled_layer_norm  # in float32 level with it, so float32 keeps torch's
            done["compiled LayerNorm"].append(name)
        if not isinstance(module, Linear):
            continue
        if not in_a_block(name):
            done["kept"].append(name)
            continue
        tokenwise = per_token(module)
        done["int8 per token" if tokenwise else "int8"].append(name)
        module.kernel = PerTokenInt8Kernel(module) if tokenwise else Int8Kernel(module)
    if not done["int8"] and not done["int8 per token"]:
        raise ValueError(f"quantization='int8': {type(model).__name__} has no wde_core Linear layer in a transformer "
                         "block to quantize (its plugin's layers cannot take int8); leave quantization unset for this "
                         "model")
    model.quantization_report = done
    return done


class Int8Kernel:
    """One ``Linear`` as an int8 GEMM: per-channel int8 weights prepacked for oneDNN, the dequantization, bias,
    activation and residual add in oneDNN's epilogue; one activation scale per batch, the outlier rows (BERT's
    special tokens, 3-8x the others) recomputed in the model's dtype so that they do not set it."""

    def __init__(self, layer: Linear) -> None:
        self.weight_scale, self.packed, self.zero_points, self.bias = quantize_weight(layer)
        fused = layer.epilogue if layer.activation else ("none", "")  # the oneDNN post-op Linear itself fuses
        self.post_op, self.activation = (fused, None) if fused is not None else (("none", ""), layer.act)
        self.out_features = layer.out_features
        self.layer = layer  # its own path, in the model's dtype, for the outlier rows
        self.outlier_factor = FFN_OUTLIER_FACTOR if layer.activation else OUTLIER_FACTOR
        # an FFN in's output feeds only the down projection, which quantizes it per token: written in bfloat16 it is
        # half the bytes to write and read again (rounding 8 bits finer than int8's); every other output is in the
        # model's dtype. Where oneDNN has no bf16 on this CPU (AVX2 only: a bf16 output falls to its reference int8
        # kernel, and a bf16 residual add is refused) oneDNN writes float32, narrowed to a bf16 model's dtype after.
        self.model_dtype = layer.weight.dtype
        wanted = torch.bfloat16 if layer.activation else self.model_dtype
        self.out_dtype = wanted if onednn_takes(wanted) else torch.float32
        self.narrows = not layer.activation and self.out_dtype != self.model_dtype
        self.float_below = float_below_rows()

    def __call__(self, x: torch.Tensor, residual: torch.Tensor | None = None) -> torch.Tensor:
        """``act(x @ W.T + b) + residual`` in the model's dtype (an FFN in's in bfloat16): the product in int8, outlier
        rows in the model's dtype; a batch of fewer than ``float_below_rows()`` rows all in the model's dtype."""
        rows = x.reshape(-1, x.shape[-1])
        if len(rows) < self.float_below:
            return self.layer.dense(x, residual)
        adds_residual = self.adds_residual(residual)
        multiple = 1 if adds_residual else ROW_MULTIPLE  # oneDNN's residual must match the rows
        factor = RESIDUAL_OUTLIER_FACTOR if adds_residual else self.outlier_factor
        with traced("wde::int8_quantize"):
            quantized, scale, outliers = _kernels().quantize_batch_uint8(rows, factor, signed_activations(), multiple)
        y = self.int8(x, scale, quantized, residual)
        if len(outliers):
            self.redo_in_dtype(y.view(-1, self.out_features), rows, outliers, residual)
        return y

    def redo_in_dtype(self, y: torch.Tensor, rows: torch.Tensor, outliers: torch.Tensor, residual) -> None:
        """Recompute the outlier rows of ``y`` (clipped by the int8 scale) by the layer's own path, in place; their
        count padded to a multiple of OUTLIER_MULTIPLE by repeating the last (computed twice, written once)."""
        count = len(outliers)
        padded = -(-count // OUTLIER_MULTIPLE) * OUTLIER_MULTIPLE
        picked = torch.cat([outliers, outliers[-1:].expand(padded - count)]) if padded > count else outliers
        res = None if residual is None else residual.reshape(-1, self.out_features).index_select(0, picked)
        rows = rows.index_select(0, picked).to(self.layer.weight.dtype)  # bf16 rows where an FFN in wrote them
        y.index_copy_(0, outliers, self.layer.dense(rows, res)[:count].to(y.dtype))

    def adds_residual(self, residual) -> bool:
        """Whether oneDNN adds ``residual`` in its epilogue (a layer with no activation)."""
        return residual is not None and self.post_op[0] == "none" and self.activation is None

    def int8(self, x: torch.Tensor, scale: float, quantized: torch.Tensor, residual) -> torch.Tensor:
        """The int8 GEMM of the quantized rows (padded rows dropped), dequantized by oneDNN with the bias, activation
        and residual."""
        out_dtype = self.out_dtype
        if self.adds_residual(residual):
            y = torch.ops.onednn.qlinear_pointwise.binary(
                quantized, scale, zero_point(), self.packed, self.weight_scale, self.zero_points,
                residual.reshape(-1, self.out_features).to(out_dtype), self.bias, 1.0, 0, out_dtype, 1.0, 0, "add",
                1.0, "none", [], "")
            return self.narrowed(y).view(*x.shape[:-1], self.out_features)
        y = torch.ops.onednn.qlinear_pointwise(quantized, scale, zero_point(), self.packed, self.weight_scale,
                                               self.zero_points,
                                               self.bias, 1.0, 0, out_dtype, self.post_op[0], [], self.post_op[1])
        y = self.narrowed(y[:x.numel() // x.shape[-1]]).view(*x.shape[:-1], self.out_features)
        if self.activation is not None:
            y = self.activation(y)
        return y if residual is None else y + residual

    def narrowed(self, y: torch.Tensor) -> torch.Tensor:
        """``y`` in the model's dtype where oneDNN wrote float32 for a bf16 model (``out_dtype``)."""
        return y.to(self.model_dtype) if self.narrows else y


def quantize_weight(layer: Linear) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """``layer``'s weight as symmetric int8 per output channel (``weight_levels``: 127, or 63 where the CPU has no int8
    dot product), prepacked for oneDNN: (scales, packed weight, the weight's zero points, the bias in float32)."""
    weight = layer.weight.detach().float()
    levels = weight_levels()
    scale = (weight.abs().amax(dim=1) / levels).clamp(min=1e-12)
    quantized = torch.round(weight / scale[:, None]).clamp(-levels, levels).to(torch.int8)
    bias = None if layer.bias is None else layer.bias.detach().float()
    return scale, torch.ops.onednn.qlinear_prepack(quantized, None), torch.zeros(len(scale), dtype=torch.long), bias


class PerTokenInt8Kernel:
    """A down projection as an int8 GEMM with one activation scale per token: oneDNN writes the int32 products
    times the weight scales as float32, then each row's own scale, the bias and the residual go on in one pass."""

    def __init__(self, layer: Linear) -> None:
        self.weight_scale, self.packed, self.zero_points, self.bias = quantize_weight(layer)
        self.out_features = layer.out_features
        self.out_dtype = layer.weight.dtype  # the model's (its input may be an FFN in's bfloat16)
        self.layer, self.float_below = layer, float_below_rows()  # the model's dtype for small batches (Int8Kernel's)

    def __call__(self, x: torch.Tensor, residual: torch.Tensor | None = None) -> torch.Tensor:
        """``x @ W.T + b + residual`` in the model's dtype, each row of ``x`` quantized with its own scale (a batch of
        fewer than ``float_below_rows()`` rows in the model's dtype)."""
        if x.numel() < self.float_below * x.shape[-1]:
            return self.layer.dense(x.to(self.out_dtype), residual)
        with traced("wde::int8_quantize_rows"):
            quantized, scales = _kernels().quantize_rows_uint8(x.reshape(-1, x.shape[-1]), signed_activations(),
                                                               ROW_MULTIPLE)
        products = torch.ops.onednn.qlinear_pointwise(quantized, 1.0, zero_point(), self.packed, self.weight_scale,
                                                      self.zero_points, None, 1.0, 0, torch.float32, "none", [], "")
        products = products[:len(scales)]  # the padding rows' products dropped
        with traced("wde::int8_dequantize_rows"):
            y = _kernels().dequantize_rows(products, scales, self.bias, residual, self.out_dtype == torch.bfloat16)
        return y.view(*x.shape[:-1], self.out_features)


def compiled_layer_norm(rows: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float) -> torch.Tensor:
    """The compiled LayerNorm of ``rows`` (a ``LayerNorm``'s kernel), named ``wde::layer_norm`` in torch profiles."""
    with traced("wde::layer_norm"):
        return _kernels().layer_norm(rows, weight, bias, eps)


def traced(name: str):
    """A named range in a torch profile while one records (the compiled calls are not torch ops: bench-cpu's split of
    the time would count them as host work); nothing otherwise."""
    return torch.profiler.record_function(name) if torch.autograd._profiler_enabled() else contextlib.nullcontext()


@functools.lru_cache(maxsize=1)
def _kernels():
    """``row_absmax``, ``quantize_uint8``, ``quantize_batch_uint8``, ``quantize_rows_uint8``, ``dequantize_rows`` (and
    ``layer_norm``): the compiled module's, else torch's (which has no ``layer_norm``: LayerNorm then stays torch's)."""
    from wde_cpu_kernels.attention import varlen_kernel

    kernel = varlen_kernel()
    return kernel if kernel is not None and hasattr(kernel, "quantize_batch_uint8") else TorchQuantizer()
