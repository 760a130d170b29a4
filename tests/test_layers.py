"""``wde_core.modeling.layers``: the fused CPU path of ``Linear`` equals the plain PyTorch computation; ``LayerNorm`` is
``nn.LayerNorm`` until a plugin sets its kernel, then runs that kernel on the rows."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from transformers.activations import ACT2FN

from wde_core.modeling.layers import LayerNorm, Linear, onednn_takes


@pytest.mark.parametrize("activation", [None, "gelu", "gelu_new", "gelu_pytorch_tanh", "relu", "silu"])
@pytest.mark.parametrize("with_residual", [False, True])
def test_fused_linear_matches_unfused_fp32(activation, with_residual):
    torch.manual_seed(0)
    layer = Linear(48, 80, activation=activation)
    x, residual = torch.randn(37, 48), torch.randn(37, 80)
    expected = F.linear(x, layer.weight, layer.bias)
    if activation:
        expected = ACT2FN[activation](expected)
    if with_residual:
        expected = expected + residual
    with torch.inference_mode():
        got = layer(x, residual=residual if with_residual else None)
    assert (got - expected).abs().max().item() <= 1e-5


def test_bfloat16_error_is_bounded():
    torch.manual_seed(0)
    layer = Linear(64, 64, activation="gelu")
    x = torch.randn(16, 64)
    with torch.inference_mode():
        reference = layer(x)
        low = layer.to(torch.bfloat16)(x.bfloat16()).float()
    assert F.cosine_similarity(low, reference, dim=-1).min().item() >= 0.999


def test_non_cpu_shapes_fall_back_to_plain_torch():
    layer = Linear(8, 4, activation="gelu")
    x = torch.randn(2, 3, 8)  # 3-D input is not fused, still correct
    with torch.inference_mode():
        assert torch.allclose(layer(x), F.gelu(F.linear(x, layer.weight, layer.bias)), atol=1e-6)


@pytest.mark.parametrize("dtype,widen", [(torch.float32, False), (torch.bfloat16, False), (torch.bfloat16, True)])
def test_prepacked_weights_match_plain_torch(dtype, widen, monkeypatch):
    """Two layers (gelu, then a residual add) before and after prepack against F.linear / F.gelu in float32 on
    the same (dtype-rounded) weights, with and without the residual: every packed path (the fused epilogue, the
    fused residual add, the bare packed product, one row through the weights laid out for a batch) is checked
    against an independent computation; bf16 both through oneDNN's bf16 product and as float32 GEMMs on the widened
    weight (``widens_bf16_gemms``, forced either way here: which one a CPU takes is its own test)."""
    monkeypatch.setattr("wde_core.modeling.layers.widens_bf16_gemms", lambda: widen)
    torch.manual_seed(1)
    first, second = Linear(32, 48, activation="gelu").to(dtype), Linear(48, 32).to(dtype)
    x = torch.randn(20, 32, dtype=dtype)
    w0, b0, w1, b1 = (p.detach().float().clone() for p in (first.weight, first.bias, second.weight, second.bias))
    expected = F.linear(F.gelu(F.linear(x.float(), w0, b0)), w1, b1)
    expected_residual = expected + x.float()
    # fp32: 1e-5 absolute; bf16: a few roundings of the output (2**-7 relative) and of the hidden layer
    atol, rtol = (1e-5, 0.0) if dtype == torch.float32 else (4e-3, 2**-7)
    with torch.inference_mode():
        outputs = {"plain": second(first(x)), "plain+residual": second(first(x), residual=x)}
        packs = dtype == torch.float32 or widen or onednn_takes(torch.bfloat16)  # no oneDNN bf16 on AVX2 CPUs
        for layer in (first, second):
            layer.prepack()
            assert (layer.packed_weight is not None) == packs and layer.widened == widen
            assert not packs or (layer.packed_weight.is_mkldnn
                                 and layer.packed_weight.dtype == (torch.float32 if widen else dtype))
        outputs |= {"packed": second(first(x)), "packed+residual": second(first(x), residual=x)}
        outputs["packed, one row"] = second(first(x[:1]))  # laid out for 4,096 rows, it serves any count
    for name, got in outputs.items():
        want = expected_residual if name.endswith("residual") else expected
        want = want[:1] if name.endswith("one row") else want
        assert got.dtype == dtype and got.shape == want.shape
        torch.testing.assert_close(got.float(), want, atol=atol, rtol=rtol, msg=lambda m, name=name: f"{name} {dtype}: {m}")


def test_bf16_gemms_are_widened_exactly_on_x86_cpus_whose_bf16_products_are_slow():
    """The rule read independently off /proc/cpuinfo: widened without AMX-BF16 where the CPU has no AVX512-BF16 or is
    Intel's; and a bf16 layer prepacked here takes the path the rule gives."""
    import platform

    from conftest import proc_cpuinfo, proc_cpuinfo_flags
    from wde_core.plugin_api import cpu_vendor, widens_bf16_gemms

    flags, vendor = proc_cpuinfo_flags(), proc_cpuinfo().get("vendor_id", "")
    assert cpu_vendor() == vendor
    x86 = platform.machine() in ("x86_64", "AMD64")
    assert widens_bf16_gemms() == (x86 and "amx_bf16" not in flags and ("avx512_bf16" not in flags
                                                                         or vendor == "GenuineIntel"))
    layer = Linear(16, 16).to(torch.bfloat16)
    layer.prepack()
    assert layer.widened == (widens_bf16_gemms() and torch.backends.mkldnn.is_available())


def test_onednn_takes_bf16_only_where_the_cpu_has_avx512_core():
    """oneDNN's bf16 linear needs AVX512BW/VL/DQ (or AMX / AVX-NE-CONVERT) on x86: read off /proc/cpuinfo here, and on
    an AVX2-only CPU (AMD Zen 3) an unprepacked and a prepacked bf16 layer still run, by torch's path or widened."""
    import platform

    from wde_core.plugin_api import cpu_flags

    flags = cpu_flags()
    if platform.machine() not in ("x86_64", "AMD64") or not flags:
        pytest.skip("reads x86 flags from /proc/cpuinfo (hardware)")
    assert onednn_takes(torch.float32)
    if {"avx512bw", "avx512vl", "avx512dq"} <= flags:
        assert onednn_takes(torch.bfloat16)
    elif not flags & {"amx_bf16", "avx_ne_convert"}:
        assert not onednn_takes(torch.bfloat16)
    torch.manual_seed(2)
    layer, x = Linear(16, 8, activation="gelu").bfloat16(), torch.randn(4, 16).bfloat16()
    want = F.gelu(F.linear(x.float(), layer.weight.float(), layer.bias.float()))
    with torch.inference_mode():
        plain = layer(x)
        layer.prepack()
        packed = layer(x)
    for got in (plain, packed):
        torch.testing.assert_close(got.float(), want, atol=4e-3, rtol=2**-7)


def test_layer_norm_is_torch_s_until_a_kernel_takes_its_rows():
    torch.manual_seed(0)
    norm, reference = LayerNorm(24, eps=1e-6), torch.nn.LayerNorm(24, eps=1e-6)
    norm.weight.data.normal_(), norm.bias.data.normal_()
    reference.load_state_dict(norm.state_dict())  # the same parameters under the same names as HF's checkpoints
    x = torch.randn(3, 5, 24)
    torch.testing.assert_close(norm(x), reference(x), rtol=0, atol=0)
    seen = []

    def kernel(rows, weight, bias, eps):  # stands for a compiled kernel: doubles torch's result
        seen.append((rows.shape, eps))
        return 2 * F.layer_norm(rows, (rows.shape[-1],), weight, bias, eps)

    norm.kernel = kernel
    torch.testing.assert_close(norm(x), 2 * reference(x))
    assert seen == [((15, 24), 1e-6)]  # the rows flattened to 2-D, the output back in the input's shape
