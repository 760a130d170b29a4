"""Whether AMX may run under oneDNN's ISA cap (the CPU's flags come from ``wde_core.plugin_api.cpu_flags``).

``ONEDNN_MAX_CPU_ISA`` (or its older name ``DNNL_MAX_CPU_ISA``) caps the instruction sets oneDNN dispatches to;
``AVX512_CORE_BF16``, for instance, keeps a Sapphire Rapids Xeon off its AMX tiles. wde's own kernels follow the
same cap, so that one variable gives a whole engine the non-AMX path: the int8 activations' form (uint8 + 128, the
only form oneDNN has JIT kernels for without AMX) and the attention kernel's AVX512-BF16 products."""

from __future__ import annotations

import os

ISA_CAP_VARIABLES = ("ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA")


def isa_cap() -> str:
    """oneDNN's ISA cap from the environment, upper case; ``"ALL"`` where none is set."""
    return next((os.environ[name] for name in ISA_CAP_VARIABLES if os.environ.get(name)), "ALL").strip().upper()


def amx_allowed() -> bool:
    """Whether oneDNN's ISA cap admits AMX: none set, ``ALL``/``DEFAULT``, or one of the AMX ISAs."""
    cap = isa_cap()
    return cap in ("ALL", "DEFAULT") or "AMX" in cap
