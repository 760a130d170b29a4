"""What this CPU offers wde: its flags and vendor (/proc/cpuinfo), the core's CPU policy (``cpu_policy``: the bf16 note,
widened bf16 GEMMs, the dtypes oneDNN's linear runs), whether AMX may run under oneDNN's ISA cap, whether it has an
int8 dot product, whether it splits 256-bit vectors in halves.

``ONEDNN_MAX_CPU_ISA`` (or its older name ``DNNL_MAX_CPU_ISA``) caps the instruction sets oneDNN dispatches to;
``AVX512_CORE_BF16``, for instance, keeps a Sapphire Rapids Xeon off its AMX tiles. wde's own kernels follow the
same cap, so that one variable gives a whole engine the non-AMX path: the int8 activations' form (uint8 + 128, the
only form oneDNN has JIT kernels for without AMX) and the attention kernel's AVX512-BF16 products."""

from __future__ import annotations

import functools
import os
import platform
from pathlib import Path

import torch

from wde_core.plugin_api import CpuPolicy

ISA_CAP_VARIABLES = ("ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA")


@functools.lru_cache(maxsize=1)
def cpu_info() -> dict[str, str]:
    """The first CPU's fields in /proc/cpuinfo (``flags``, ``vendor_id``, ``cpu family``, ...); empty where unknown."""
    try:
        first = Path("/proc/cpuinfo").read_text(encoding="utf-8").split("\n\n", 1)[0]
    except OSError:
        return {}
    return {key.strip(): value.strip() for key, _, value in (line.partition(":") for line in first.splitlines())}


def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags as Linux lists them (``avx512_bf16``, ``amx_int8``, ...); empty where unknown."""
    return frozenset(cpu_info().get("flags", "").split())


def cpu_vendor() -> str:
    """The CPU's vendor as /proc/cpuinfo names it (``GenuineIntel``, ``AuthenticAMD``); empty where unknown."""
    return cpu_info().get("vendor_id", "")


@functools.lru_cache(maxsize=1)
def cpu_policy() -> CpuPolicy:
    """The core's CPU policy here (the ``wde_get_cpu_policy`` hook's answer)."""
    dtypes = tuple(name for name in ("float32", "bfloat16") if onednn_takes(getattr(torch, name)))
    return CpuPolicy(bf16_note=bf16_note(), widens_bf16_gemms=widens_bf16_gemms(), onednn_dtypes=dtypes)


def onednn_takes(dtype: torch.dtype) -> bool:
    """Whether oneDNN's CPU linear runs ``dtype`` here: float32 wherever torch has oneDNN, bfloat16 only where oneDNN
    has bf16 kernels for this CPU (none on an AVX2-only CPU such as AMD Zen 3, where it refuses to build the product)."""
    if dtype == torch.bfloat16:
        return bool(getattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: False)())
    return dtype == torch.float32


@functools.lru_cache(maxsize=1)
def widens_bf16_gemms() -> bool:
    """Whether bf16 linear layers run as float32 GEMMs on widened weights here (``Linear.prepack``): on x86 CPUs
    without AMX-BF16 that lack AVX512-BF16 (oneDNN's bf16 GEMMs 0.2x float32's, emulated) or are Intel's (whose cores
    issue ``vdpbf16ps`` one every two cycles: 0.6x float32's, a Xeon family 6 model 207). Products of bf16 values
    are exact in float32, so the result is a bf16 GEMM with float32 sums, as oneDNN's."""
    flags = cpu_flags()
    if platform.machine() not in ("x86_64", "AMD64") or "amx_bf16" in flags:
        return False
    return "avx512_bf16" not in flags or cpu_vendor() == "GenuineIntel"


def bf16_note() -> str:
    """What ``dtype="bfloat16"`` gives on this CPU, from its flags (AMX-BF16, AVX512-BF16, or emulated without)."""
    flags = cpu_flags()
    if "amx_bf16" in flags or bool(getattr(torch._C._cpu, "_init_amx", lambda: False)()):
        return ("; this CPU has AMX-BF16: dtype='bfloat16' runs the linear layers on AMX, about 2x the float32 "
                "tokens/s on all-MiniLM-L6-v2 (min cosine 0.9999 vs float32)")
    if not widens_bf16_gemms():
        return ("; this CPU has AVX512-BF16: dtype='bfloat16' gave 1.8x the float32 tokens/s on "
                "all-MiniLM-L6-v2 (min cosine 0.9999 vs float32)")
    has = "AVX512-BF16 on Intel cores (vdpbf16ps at half their FMAs' rate)" if "avx512_bf16" in flags else \
        "neither AMX-BF16 nor AVX512-BF16 (bf16 arithmetic emulated)"
    return (f"; this CPU has {has}: dtype='bfloat16' runs the linear layers as float32 GEMMs on widened weights "
            "(exact bf16 products, float32 sums), about float32's speed: bf16 saves memory here, not time")


def isa_cap() -> str:
    """oneDNN's ISA cap from the environment, upper case; ``"ALL"`` where none is set."""
    return next((os.environ[name] for name in ISA_CAP_VARIABLES if os.environ.get(name)), "ALL").strip().upper()


def amx_allowed() -> bool:
    """Whether oneDNN's ISA cap admits AMX: none set, ``ALL``/``DEFAULT``, or one of the AMX ISAs."""
    cap = isa_cap()
    return cap in ("ALL", "DEFAULT") or "AMX" in cap


@functools.lru_cache(maxsize=1)
def int8_dot_product() -> bool:
    """Whether the CPU has an int8 dot product instruction (AVX512-VNNI, AVX-VNNI, AMX-INT8; CPUs other than x86 count
    as having one). Without one (AVX2-only x86 CPUs: AMD Zen 1-3, Xeons before Cascade Lake) oneDNN's int8 GEMM is its
    ``gemm:jit``, which multiplies with ``vpmaddubsw`` (``int8.weight_levels``) and packs the weights on every call
    (``int8.float_below_rows``)."""
    x86 = platform.machine() in ("x86_64", "AMD64")
    return not x86 or bool({"avx512_vnni", "avx_vnni", "amx_int8"} & cpu_flags())


@functools.lru_cache(maxsize=1)
def splits_256_bit_vectors() -> bool:
    """Whether the CPU runs each 256-bit AVX2 instruction as two 128-bit halves: AMD's Zen and Zen+ (family 0x17,
    models below 0x30; Zen 2 widened the units), Hygon's Dhyana (family 0x18, a Zen) and AMD's families 0x15-0x16.
    There oneDNN's AVX2 int8 GEMM never caught up with float32 (``int8.float_below_rows``)."""
    family, model = cpu_family_model()
    amd = cpu_vendor() in ("AuthenticAMD", "HygonGenuine")
    return amd and (family in (0x15, 0x16, 0x18) or (family == 0x17 and model < 0x30))


def cpu_family_model() -> tuple[int, int]:
    """The first CPU's ``cpu family`` and ``model`` numbers from /proc/cpuinfo; ``(0, 0)`` where unknown."""
    family, model = (cpu_info().get(name, "") for name in ("cpu family", "model"))
    return int(family) if family.isdigit() else 0, int(model) if model.isdigit() else 0
