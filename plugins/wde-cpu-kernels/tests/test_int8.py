"""quantization="int8", layer by layer: the compiled quantizer against torch's, one int8 layer against the same
arithmetic done in float64, the outlier rows through the layer's own path. What each CPU's instructions change:
test_int8_cpu_rules.py; whole models: test_int8_models.py."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from wde_core.plugin_api import Linear
from wde_cpu_kernels import int8
from wde_cpu_kernels.cpu import onednn_takes
from wde_cpu_kernels.attention import varlen_kernel
from wde_cpu_kernels.torch_quantizer import TorchQuantizer

from kernel_builds import int8_past_float_rows, needs_kernel, runs  # noqa: F401 - an autouse fixture

INT8_ROWS = int8.FLOAT_BELOW_ROWS + 8  # a batch that runs in int8 on every CPU (with int8_past_float_rows)


@needs_kernel
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_compiled_layer_norm_matches_torch_in_float64(dtype):
    """Against F.layer_norm in float64 on the same (dtype-rounded) inputs: float32 to float32's rounding, bfloat16 within
    one bf16 rounding of the exact result (as torch's own bf16 LayerNorm), rows at a stride and a 16-column tail."""
    torch.manual_seed(0)
    wide = (torch.randn(300, 800) * torch.linspace(0.1, 20, 300)[:, None] + 3).to(dtype)
    rows = wide[:, :776]  # 776 = 48 x 16 + 8 columns, each row 800 apart
    weight, bias = torch.randn(776).to(dtype), torch.randn(776).to(dtype)
    exact = F.layer_norm(rows.double(), (776,), weight.double(), bias.double(), 1e-12)
    got = varlen_kernel().layer_norm(rows, weight, bias, 1e-12)
    assert got.dtype == dtype and got.shape == rows.shape
    bound = 2 ** -8 * exact.abs() + 1e-6 if dtype == torch.bfloat16 else 1e-5 * exact.abs().amax()
    assert ((got.double() - exact).abs() <= bound).all()
    theirs = F.layer_norm(rows, (776,), weight, bias, 1e-12)
    assert (got.double() - exact).abs().mean() <= 1.05 * (theirs.double() - exact).abs().mean()


@needs_kernel
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_compiled_quantizer_equals_torch(dtype):
    kernel = varlen_kernel()
    rows = (torch.randn(300, 200) * torch.linspace(0.1, 9, 300)[:, None]).to(dtype)
    rows[7, 3] = -50.0  # saturates at -128 with the scale below
    rows[8, 130], rows[9, 198] = 50.0, -50.0  # and at 127, and in a row's tail (200 = 3 x 64 + 8 columns)
    assert torch.equal(kernel.row_absmax(rows), rows.float().abs().amax(dim=1))
    scale = 20.0 / 127
    expected = torch.quantize_per_tensor(rows.float(), scale, 0, torch.qint8).int_repr()  # symmetric int8, + 128:
    assert torch.equal(kernel.quantize_uint8(rows, scale), (expected.to(torch.int16) + 128).to(torch.uint8))
    assert kernel.quantize_uint8(rows, scale)[[7, 8, 9], [3, 130, 198]].tolist() == [0, 255, 0]  # -128, 127 + 128
    strided = torch.randn(64, 96).to(dtype)[:, :80]  # rows at a stride, as views of a fused projection are
    expected = torch.quantize_per_tensor(strided.float().contiguous(), 0.02, 0, torch.qint8).int_repr()
    assert torch.equal(kernel.quantize_uint8(strided, 0.02), (expected.to(torch.int16) + 128).to(torch.uint8))
    signed = kernel.quantize_uint8(strided, 0.02, int8=True)  # the int8 form AMX-INT8 takes: the same values, no offset
    assert signed.dtype == torch.int8 and torch.equal(signed, expected)



@needs_kernel
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows", [1, 2, 301])
def test_one_call_finds_the_outliers_and_quantizes_as_torch_does(dtype, rows):
    """quantize_batch_uint8 against torch: the lower median's row magnitude times the factor marks the outliers, the
    largest of the other rows sets the scale, torch.quantize_per_tensor gives the int8 values (outliers saturate)."""
    torch.manual_seed(rows)
    x = (torch.rand(rows, 200) * 2 - 1).to(dtype)  # every row's largest magnitude near 1
    x[rows // 3, 5] = 40.0  # one outlier row
    quantized, scale, outliers = varlen_kernel().quantize_batch_uint8(x, 2.0)
    magnitudes = x.float().abs().amax(dim=1)
    outlying = magnitudes > 2.0 * magnitudes.median()
    assert torch.equal(outliers, outlying.nonzero().flatten())
    assert scale == max(magnitudes[~outlying].max().item(), 1e-8) / 127
    expected = torch.quantize_per_tensor(x.float(), scale, 128, torch.quint8).int_repr()
    assert (quantized.int() - expected.int()).abs().max() <= 1  # x * (1 / s) against torch's x / s at a half
    assert (quantized == expected).float().mean() > 0.99
    assert outliers.tolist() == ([] if rows == 1 else [rows // 3])  # one row is its own median
    torch_quantized, torch_scale, torch_outliers = TorchQuantizer.quantize_batch_uint8(x, 2.0)  # the fallback
    assert torch_scale == scale and torch.equal(torch_outliers, outliers) and torch.equal(torch_quantized, expected)
    for quantizer in (varlen_kernel(), TorchQuantizer):  # as int8: the uint8 values less 128, the same scale
        signed, signed_scale, signed_outliers = quantizer.quantize_batch_uint8(x, 2.0, True)
        assert signed.dtype == torch.int8 and signed_scale == scale and torch.equal(signed_outliers, outliers)
        assert torch.equal(signed, (quantized.to(torch.int16) - 128).to(torch.int8))

@needs_kernel
@pytest.mark.parametrize("signed", [False, True])
def test_quantized_rows_are_padded_to_a_multiple_with_the_zero_point(signed):
    """Both quantizers (compiled and torch's) append rows of the zero point up to ``row_multiple`` and quantize the
    real rows as unpadded; per-token scales stay one per real row."""
    x = torch.randn(130, 96).bfloat16()
    x[5] *= 30  # an outlier row
    zero = 0 if signed else 128
    for quantizer in (varlen_kernel(), TorchQuantizer):
        plain, scale, outliers = quantizer.quantize_batch_uint8(x, 2.0, signed)
        padded, padded_scale, padded_outliers = quantizer.quantize_batch_uint8(x, 2.0, signed, 64)
        assert padded.shape == (192, 96) and torch.equal(padded[:130], plain) and bool((padded[130:] == zero).all())
        assert padded_scale == scale and torch.equal(padded_outliers, outliers) and outliers.tolist() == [5]
        rows, scales = quantizer.quantize_rows_uint8(x, signed)
        padded_rows, padded_scales = quantizer.quantize_rows_uint8(x, signed, 64)
        assert padded_rows.shape == (192, 96) and torch.equal(padded_rows[:130], rows)
        assert bool((padded_rows[130:] == zero).all()) and torch.equal(padded_scales, scales) and len(scales) == 130


def reference_int8(layer: Linear, x: torch.Tensor, residual=None) -> torch.Tensor:
    """The same quantization done by hand in float64: per-channel weights, one activation scale for the ordinary
    rows, the outlier rows exactly in float (a layer adding a residual has none: every row at one scale)."""
    w, levels = layer.weight.double(), int8.weight_levels()  # 127, or 63 without an int8 dot product (its own test)
    w_scale = (w.abs().amax(dim=1) / levels).clamp(min=1e-12)
    wq = torch.round(w / w_scale[:, None]).clamp(-levels, levels)
    magnitudes = x.double().abs().amax(dim=1)
    factor = int8.FFN_OUTLIER_FACTOR if layer.activation else int8.OUTLIER_FACTOR  # FFN in: 3, else 2
    factor = float("inf") if residual is not None else factor
    outlying = magnitudes > factor * magnitudes.median()
    scale = magnitudes.masked_fill(outlying, 0).max() / 127
    xq = torch.round(x.double() / scale).clamp(-128, 127)
    y = (xq @ wq.T) * scale * w_scale + layer.bias.double()
    y[outlying] = x.double()[outlying] @ w.T + layer.bias.double()
    if layer.act is not None:
        y = layer.act(y)
    return y if residual is None else y + residual.double()


@needs_kernel
@pytest.mark.parametrize("activation,residual", [(None, False), ("gelu", False), (None, True), ("relu", False),
                                                 ("gelu_pytorch_tanh", False), ("silu", False)])
def test_one_layer_equals_the_int8_arithmetic(activation, residual):
    torch.manual_seed(0)
    layer = Linear(64, 48, activation=activation)
    x = torch.randn(INT8_ROWS, 64)
    x[[3, 17]] *= 10  # two outlier rows, as BERT's special tokens are
    res = torch.randn(INT8_ROWS, 48) if residual else None
    layer.kernel = int8.Int8Kernel(layer)
    got = layer(x, res)
    # an FFN in (a layer with an activation) writes bfloat16: only the down projection reads it, to quantize it (float32
    # where oneDNN has no bf16 on this CPU: AVX2 only)
    assert got.dtype == (torch.bfloat16 if activation and onednn_takes(torch.bfloat16) else torch.float32)
    expected = reference_int8(layer, x, res)
    assert_within_rounding(got, expected)
    dense = layer.dense(x[[3, 17]], None if res is None else res[[3, 17]])
    if residual:  # the attention output: the large rows set the scale, none is recomputed, none is clipped
        assert not torch.allclose(got[[3, 17]], dense, atol=1e-5) and (got[[3, 17]] - dense).abs().max() < 0.5
    else:
        assert torch.equal(got[[3, 17]], dense.to(got.dtype)) if activation else torch.allclose(got[[3, 17]], dense,
                                                                                              atol=1e-5)
    plain = x[[i for i in range(len(x)) if i not in (3, 17)]]  # no outlier: the int8 product is all there is
    assert_within_rounding(int8.Int8Kernel(layer)(plain), reference_int8(layer, plain))


def assert_within_rounding(got: torch.Tensor, expected: torch.Tensor) -> None:
    """``got`` equals the float64 ``expected`` to 1e-4, plus half a bf16 unit where ``got`` is bf16 (2^-9 relative)."""
    rounding = expected.abs() * 2.0 ** -8 if got.dtype == torch.bfloat16 else 0.0
    assert bool(((got.double() - expected).abs() <= rounding + 1e-4).all()), (got.double() - expected).abs().max()


def reference_per_token(layer: Linear, x: torch.Tensor, residual=None) -> torch.Tensor:
    """Per-token int8 done by hand: per-channel weights, each row its own scale (the row quantized in float32, as
    x * (127 / max |x|), rounded half to even; the weights in float32 as the kernel does: bf16 weights land on
    rounding ties), the products and dequantization in float64."""
    w, levels = layer.weight.float(), int8.weight_levels()
    w_scale = (w.abs().amax(dim=1) / levels).clamp(min=1e-12)
    wq, w_scale = torch.round(w / w_scale[:, None]).clamp(-levels, levels).double(), w_scale.double()
    magnitude = x.float().abs().amax(dim=1, keepdim=True)
    inverse = torch.full_like(magnitude, 127.0) / magnitude  # a division: torch's 127 / t is 127 * (1 / t)
    xq = torch.round(x.float() * inverse).clamp(-128, 127).double()
    y = (xq @ wq.T) * (magnitude / 127).double() * w_scale + layer.bias.double()
    return y if residual is None else y + residual.double()


@needs_kernel
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("residual", [False, True])
def test_a_down_projection_equals_the_per_token_arithmetic(dtype, residual):
    torch.manual_seed(0)
    layer = Linear(96, 40)
    x = torch.randn(INT8_ROWS, 96) * torch.linspace(0.05, 20, INT8_ROWS)[:, None]  # rows 400x apart: one scale each
    res = torch.randn(INT8_ROWS, 40) if residual else None
    layer.kernel = int8.PerTokenInt8Kernel(layer.to(dtype))
    got = layer(x.to(dtype), None if res is None else res.to(dtype)).double()
    expected = reference_per_token(layer.float(), x.to(dtype).float(), None if res is None else res.to(dtype).float())
    tolerance = 1e-4 if dtype == torch.float32 else 4e-3  # bf16: the output's rounding (8 bits)
    assert ((got - expected).abs() / expected.abs().clamp(min=1)).max() < tolerance
    fallback, compiled = TorchQuantizer, int8._kernels()  # torch's ops where the module is missing
    (q_torch, s_torch), (q_ours, s_ours) = (quantizer.quantize_rows_uint8(x.to(dtype)) for quantizer in (fallback, compiled))
    assert torch.allclose(s_torch, s_ours) and (q_torch.int() - q_ours.int()).abs().max() <= 1  # x / s vs x * (1 / s)
    for quantizer, unsigned in ((fallback, q_torch), (compiled, q_ours)):  # as int8: the same values less 128
        signed, scales = quantizer.quantize_rows_uint8(x.to(dtype), True)
        assert signed.dtype == torch.int8 and torch.equal(signed, (unsigned.to(torch.int16) - 128).to(torch.int8))
        assert torch.equal(scales, s_torch if quantizer is fallback else s_ours)
    products = torch.randn(INT8_ROWS, 40)
    for bias, extra in ((layer.bias.float(), None if res is None else res.to(dtype)), (None, None)):
        assert torch.allclose(fallback.dequantize_rows(products, s_ours, bias, extra, dtype == torch.bfloat16).float(),
                              compiled.dequantize_rows(products, s_ours, bias, extra, dtype == torch.bfloat16).float(),
                              atol=1e-6, rtol=4e-3 if dtype == torch.bfloat16 else 1e-6)



def test_the_avx2_build_s_row_kernels_equal_the_avx512_build_s():
    """Where the CPU runs both builds (every AVX-512 CPU), the AVX2 module's quantizers give the same bytes, scales and
    outliers as the AVX-512 module's, its dequantization and LayerNorm the same values to float rounding, on rows
    whose width is not a multiple of 8 or 16 (the masked tails) as well."""
    if not runs("AVX512"):
        pytest.skip("no AVX-512 on this CPU (hardware)")  # only one build runs here
    from wde_cpu_kernels import _varlen, _varlen_avx2

    torch.manual_seed(3)
    for cols in (384, 100, 7):
        for dtype in (torch.float32, torch.bfloat16):
            x = (torch.randn(37, cols) * torch.rand(37, 1) * 4).to(dtype)
            x[5] *= 30  # an outlier row
            for name, args in (("quantize_batch_uint8", (x, 2.0, False, 16)), ("quantize_rows_uint8", (x, True, 16)),
                               ("quantize_uint8", (x, 0.03, False, 1)), ("row_absmax", (x,))):
                ours, theirs = getattr(_varlen_avx2, name)(*args), getattr(_varlen, name)(*args)
                for a, b in zip(ours if isinstance(ours, tuple) else (ours,), theirs if isinstance(theirs, tuple)
                                else (theirs,), strict=True):
                    assert (a == b) if isinstance(a, float) else torch.equal(a, b), (name, cols, dtype)
            weight, bias = torch.randn(cols), torch.randn(cols)
            torch.testing.assert_close(_varlen_avx2.layer_norm(x, weight, bias, 1e-12),
                                       _varlen.layer_norm(x, weight, bias, 1e-12), atol=1e-5, rtol=1e-5)
            products, scales = torch.randn(37, cols), torch.rand(37)
            for residual in (None, x):
                torch.testing.assert_close(_varlen_avx2.dequantize_rows(products, scales, bias, residual,
                                                                        dtype == torch.bfloat16),
                                           _varlen.dequantize_rows(products, scales, bias, residual,
                                                                   dtype == torch.bfloat16), atol=1e-6, rtol=1e-6)


@needs_kernel
def test_the_compiled_quantization_is_named_in_torch_profiles():
    """bench-cpu splits wde's time by the profiler's events: the compiled (de)quantization and LayerNorm calls, not
    torch ops, are named there while a profile records (else they would count as host work)."""
    from torch.profiler import ProfilerActivity, profile

    from wde_core.plugin_api import LayerNorm

    torch.manual_seed(0)
    wide, down, norm = Linear(32, 64), Linear(64, 32), LayerNorm(32)
    wide.kernel, down.kernel, norm.kernel = int8.Int8Kernel(wide), int8.PerTokenInt8Kernel(down), int8.compiled_layer_norm
    with torch.inference_mode(), profile(activities=[ProfilerActivity.CPU]) as prof:
        norm(down(wide(torch.randn(int8.FLOAT_BELOW_ROWS, 32))))  # as many rows as run in int8 on every CPU
    names = {event.key for event in prof.key_averages()}
    assert {"wde::int8_quantize", "wde::int8_quantize_rows", "wde::int8_dequantize_rows", "wde::layer_norm"} <= names
