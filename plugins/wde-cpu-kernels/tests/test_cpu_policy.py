"""The core's CPU policy as wde-cpu-kernels answers it (``wde_get_cpu_policy``): the CPU's flags and vendor, widened
bf16 GEMMs and the dtypes oneDNN's linear takes, each against the rule read off /proc/cpuinfo here."""

from __future__ import annotations

import platform
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from wde_core.plugin_api import CpuPolicy, Linear, PluginHost
from wde_cpu_kernels.cpu import cpu_flags, cpu_policy, cpu_vendor, onednn_takes, widens_bf16_gemms

X86 = platform.machine() in ("x86_64", "AMD64")


def proc_cpuinfo() -> dict[str, str]:
    """The last CPU's fields in /proc/cpuinfo, read here independently of ``wde_cpu_kernels.cpu`` (all CPUs alike)."""
    path = Path("/proc/cpuinfo")
    lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
    return {key.strip(): value.strip() for key, value in (line.split(":", 1) for line in lines if ":" in line)}


def test_the_cpus_flags_and_vendor_are_read_off_proc_cpuinfo():
    info = proc_cpuinfo()
    assert cpu_flags() == frozenset(info.get("flags", "").split()) and cpu_vendor() == info.get("vendor_id", "")
    if info and X86:
        assert {"fpu", "sse2"} <= cpu_flags()  # every x86-64 CPU lists them


def test_the_plugin_answers_the_hook_with_this_cpus_policy():
    answer = PluginHost().load().hook.wde_get_cpu_policy()
    assert isinstance(answer, CpuPolicy) and answer == cpu_policy()
    assert answer.widens_bf16_gemms == widens_bf16_gemms() and answer.bf16_note.startswith("; this CPU has ")
    assert answer.onednn_dtypes == tuple(n for n in ("float32", "bfloat16") if onednn_takes(getattr(torch, n)))


def test_bf16_gemms_are_widened_exactly_on_x86_cpus_whose_bf16_products_are_slow():
    """Widened without AMX-BF16 where the CPU has no AVX512-BF16 or is Intel's; a bf16 layer prepacked under the
    policy takes the path the rule gives."""
    info = proc_cpuinfo()
    flags, vendor = set(info.get("flags", "").split()), info.get("vendor_id", "")
    assert widens_bf16_gemms() == (X86 and "amx_bf16" not in flags and ("avx512_bf16" not in flags
                                                                        or vendor == "GenuineIntel"))
    layer = Linear(16, 16).to(torch.bfloat16)
    layer.prepack(cpu_policy())
    assert layer.widened == (widens_bf16_gemms() and torch.backends.mkldnn.is_available())


def test_onednn_takes_bf16_only_where_the_cpu_has_avx512_core():
    """oneDNN's bf16 linear needs AVX512BW/VL/DQ (or AMX / AVX-NE-CONVERT) on x86: read off /proc/cpuinfo here, and on
    an AVX2-only CPU (AMD Zen 3) an unprepacked and a prepacked bf16 layer still run, by torch's path or widened."""
    flags = set(proc_cpuinfo().get("flags", "").split())
    if not X86 or not flags:
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
        layer.prepack(cpu_policy())
        packed = layer(x)
    for got in (plain, packed):
        torch.testing.assert_close(got.float(), want, atol=4e-3, rtol=2**-7)
