"""quantization="int8" by CPU: what each CPU's instructions change, against rules read off /proc/cpuinfo here (7-bit
weights without an int8 dot product, small batches in float where oneDNN packs the weights on every call, every batch
in float where the CPU splits 256-bit vectors in halves, int8 activations on AMX); WDE_INT8_FLOAT_BELOW_ROWS."""

from __future__ import annotations

import pytest
import torch

from wde_plugin_kit.cpu_info import cpu_flags, proc_cpuinfo, proc_cpuinfo_flags
from wde_core.plugin_api import Linear
from wde_cpu_kernels import int8

from kernel_builds import int8_past_float_rows, needs_kernel  # noqa: F401 - an autouse fixture

def cpuinfo_int8_dot_product() -> bool:
    """Whether the CPU has an int8 dot product instruction, read off /proc/cpuinfo here (AVX512-VNNI, AVX-VNNI or
    AMX-INT8 on x86; other CPUs count as having one), not by wde's own reader."""
    import platform

    vnni = {"avx512_vnni", "avx_vnni", "amx_int8"} & proc_cpuinfo_flags()
    return platform.machine() not in ("x86_64", "AMD64") or bool(vnni)


def test_weights_take_7_bits_exactly_where_the_cpu_has_no_int8_dot_product():
    """63 levels on x86 CPUs without AVX512-VNNI, AVX-VNNI or AMX-INT8, 127 elsewhere; and a layer whose every product
    is at its largest (activations 255 as uint8, weights at the top level) gives the exact int8 arithmetic, which
    int16 pair sums past 32,767 would not (vpmaddubsw saturating, on those CPUs)."""
    assert int8.int8_dot_product() == cpuinfo_int8_dot_product()
    assert int8.weight_levels() == (127.0 if cpuinfo_int8_dot_product() else 63.0)
    layer = Linear(64, 8)
    with torch.no_grad():
        layer.weight.fill_(1.0), layer.bias.zero_()
        layer.weight[1::2] *= -1.0
    x = torch.full((int8.FLOAT_BELOW_ROWS, 64), 3.0)  # every activation at the scale's top: uint8 255
    layer.kernel = int8.Int8Kernel(layer)
    with torch.inference_mode():
        torch.testing.assert_close(layer(x), x @ layer.weight.T, atol=1e-4, rtol=1e-5)


@needs_kernel
@pytest.mark.parametrize("per_token", [False, True])
def test_small_batches_run_in_the_models_dtype_where_the_cpu_has_no_int8_dot_product(per_token):
    """Where oneDNN's int8 GEMM packs the weights on every call (no int8 dot product), a batch of fewer than
    FLOAT_BELOW_ROWS rows runs by the layer's own weights, exactly as the unquantized layer; a batch of that many rows,
    and on other CPUs any batch, runs in int8 (off the float result by int8's rounding)."""
    torch.manual_seed(0)
    layer = Linear(96, 40) if per_token else Linear(64, 96)
    layer.kernel = int8.PerTokenInt8Kernel(layer) if per_token else int8.Int8Kernel(layer)
    assert int8.cpu_float_below_rows() == cpuinfo_float_below_rows()
    assert int8.float_below_rows() == (0 if cpuinfo_int8_dot_product() else int8.FLOAT_BELOW_ROWS)  # the fixture's
    for rows in (1, int8.FLOAT_BELOW_ROWS - 1, int8.FLOAT_BELOW_ROWS):
        x, res = torch.randn(rows, layer.in_features), torch.randn(rows, layer.out_features)
        with torch.inference_mode():
            got, dense = layer(x, res), layer.dense(x, res)
        in_float = rows < int8.float_below_rows()
        assert torch.equal(got, dense) == in_float, rows
        assert (got - dense).abs().max() < 0.1, rows  # int8's rounding, not another product


def cpuinfo_float_below_rows() -> int:
    """The rows below which int8 layers should run in the model's dtype on this CPU, from /proc/cpuinfo read here:
    0 with an int8 dot product; every batch on AMD's Zen and Zen+ (family 23, models below 48: 128-bit vector units),
    Hygon's Dhyana (family 24) and AMD's families 21-22; 112 on other AVX2 CPUs."""
    info = proc_cpuinfo()
    family, model = int(info.get("cpu family", 0)), int(info.get("model", 0))
    halves = info.get("vendor_id") in ("AuthenticAMD", "HygonGenuine") and (
        family in (21, 22, 24) or (family == 23 and model < 48))
    return 0 if cpuinfo_int8_dot_product() else int8.ALWAYS_FLOAT if halves else int8.FLOAT_BELOW_ROWS


@needs_kernel
def test_every_batch_runs_in_the_models_dtype_where_the_cpu_splits_256_bit_vectors(monkeypatch):
    """An AVX2 CPU with 128-bit vector units (AMD Zen 1: int8 0.3-0.93x float32 at every size) runs every batch by
    the layer's own weights, and `wde inspect`'s reason says so; WDE_INT8_FLOAT_BELOW_ROWS=0 forces int8 there."""
    monkeypatch.delenv(int8.FLOAT_BELOW_ROWS_VARIABLE, raising=False)
    monkeypatch.setattr(int8, "int8_dot_product", lambda: False)
    monkeypatch.setattr(int8, "splits_256_bit_vectors", lambda: True)
    assert int8.float_below_rows() == int8.ALWAYS_FLOAT
    assert "; every batch in float32 (this CPU splits 256-bit vectors in halves" in int8.float_rows_note("float32")
    torch.manual_seed(0)
    layer = Linear(64, 96)
    layer.kernel = int8.Int8Kernel(layer)
    x = torch.randn(1024, 64)
    with torch.inference_mode():
        assert torch.equal(layer(x), layer.dense(x))
        monkeypatch.setenv(int8.FLOAT_BELOW_ROWS_VARIABLE, "0")
        assert int8.float_rows_note("float32") == ""
        layer.kernel = int8.Int8Kernel(layer)
        assert not torch.equal(layer(x), layer.dense(x))


def test_the_float_rows_variable_is_read_and_a_bad_value_refused(monkeypatch, tiny_bert_dir):
    from wde_core import Engine

    monkeypatch.setenv(int8.FLOAT_BELOW_ROWS_VARIABLE, "300")
    assert int8.float_below_rows() == 300
    assert int8.float_rows_note("bfloat16") == \
        "; batches of fewer than 300 rows in bfloat16 (WDE_INT8_FLOAT_BELOW_ROWS)"
    monkeypatch.setenv(int8.FLOAT_BELOW_ROWS_VARIABLE, "-1")
    with pytest.raises(ValueError, match=r"WDE_INT8_FLOAT_BELOW_ROWS='-1': expected a whole number of rows"):
        Engine(str(tiny_bert_dir), quantization="int8")


def test_activations_are_int8_exactly_where_the_cpu_has_amx_int8(monkeypatch):
    amx_int8 = {"amx_int8", "amx_tile"} <= cpu_flags()
    int8.signed_activations.cache_clear()
    assert int8.signed_activations() == amx_int8
    assert int8.zero_point() == (0 if amx_int8 else 128)
    for cap, admits_amx in (("avx512_core_bf16", False), ("AVX512_CORE_AMX", True), ("ALL", True)):
        monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", cap)
        int8.signed_activations.cache_clear()
        assert int8.signed_activations() == (amx_int8 and admits_amx), cap
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA")
    int8.signed_activations.cache_clear()
