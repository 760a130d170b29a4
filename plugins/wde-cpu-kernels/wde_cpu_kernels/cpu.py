"""What this CPU offers wde's kernels: whether AMX may run under oneDNN's ISA cap, whether it has an int8 dot product,
whether it splits 256-bit vectors in halves (the CPU's flags come from ``wde_core.plugin_api.cpu_flags``).

``ONEDNN_MAX_CPU_ISA`` (or its older name ``DNNL_MAX_CPU_ISA``) caps the instruction sets oneDNN dispatches to;
``AVX512_CORE_BF16``, for instance, keeps a Sapphire Rapids Xeon off its AMX tiles. wde's own kernels follow the
same cap, so that one variable gives a whole engine the non-AMX path: the int8 activations' form (uint8 + 128, the
only form oneDNN has JIT kernels for without AMX) and the attention kernel's AVX512-BF16 products."""

from __future__ import annotations

import functools
import os
import platform
from pathlib import Path

from wde_core.plugin_api import cpu_flags, cpu_vendor

ISA_CAP_VARIABLES = ("ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA")


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
    """The first CPU's ``cpu family`` and ``model`` numbers from /proc/cpuinfo; ``(0, 0)`` where unknown (the
    vendor comes from ``wde_core.plugin_api.cpu_vendor``, which the plugin API has; these two it does not)."""
    try:
        first = Path("/proc/cpuinfo").read_text(encoding="utf-8").split("\n\n", 1)[0]
    except OSError:
        return 0, 0
    fields = {key.strip(): value.strip() for key, _, value in (line.partition(":") for line in first.splitlines())}
    family, model = (fields.get(name, "") for name in ("cpu family", "model"))
    return int(family) if family.isdigit() else 0, int(model) if model.isdigit() else 0
