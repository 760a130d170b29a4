"""``wde_core.modeling.layers``: the fused CPU path of ``Linear`` equals the plain PyTorch computation; ``LayerNorm`` is
``nn.LayerNorm`` until a plugin sets its kernel, then runs that kernel on the rows."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F
from transformers.activations import ACT2FN

from wde_core.modeling.layers import LayerNorm, Linear
from wde_core.plugin_api import CpuPolicy


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
def test_prepacked_weights_match_plain_torch(dtype, widen):
    """Two layers (gelu, then a residual add) before and after prepack against F.linear / F.gelu in float32 on
    the same (dtype-rounded) weights, with and without the residual: every packed path (the fused epilogue, the
    fused residual add, the bare packed product, one row through the weights laid out for a batch) is checked
    against an independent computation; bf16 both through oneDNN's bf16 product and as float32 GEMMs on the widened
    weight (``CpuPolicy.widens_bf16_gemms``, forced either way here: which one a CPU takes is wde-cpu-kernels' test)."""
    from wde_cpu_kernels.cpu import cpu_policy

    policy = replace(cpu_policy(), widens_bf16_gemms=widen)
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
        packs = dtype == torch.float32 or widen or policy.onednn_takes(torch.bfloat16)  # no oneDNN bf16 on AVX2
        for layer in (first, second):
            layer.prepack(policy)
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


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_default_cpu_policy_packs_float32_alone(dtype):
    """With no plugin's CPU policy (``CpuPolicy()``) float32 goes through oneDNN and bf16 through torch's own path,
    packed or not, both against F.linear in float32 on the same weights."""
    torch.manual_seed(2)
    layer, x = Linear(16, 8, activation="gelu").to(dtype), torch.randn(4, 16).to(dtype)
    want = F.gelu(F.linear(x.float(), layer.weight.float(), layer.bias.float()))
    with torch.inference_mode():
        plain = layer(x)
        layer.prepack(CpuPolicy())
        packed = layer(x)
    assert (layer.packed_weight is not None) == (dtype == torch.float32 and torch.backends.mkldnn.is_available())
    assert not layer.widened and CpuPolicy().onednn_dtypes == ("float32",) and CpuPolicy().bf16_note == ""
    for got in (plain, packed):
        torch.testing.assert_close(got.float(), want, atol=1e-5 if dtype == torch.float32 else 4e-3, rtol=2**-7)


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
