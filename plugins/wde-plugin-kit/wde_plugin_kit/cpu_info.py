"""What the CPU tests run on: the attention backends parity tests cover on CPU (``CPU_BACKENDS``), the CI switch,
and /proc/cpuinfo read independently of wde_core's reader."""

from __future__ import annotations

import os
from pathlib import Path

# a plugin's tests run alone in a venv of its declared dependencies, wde-cpu-kernels deliberately absent
ALONE_VARIABLE = "WDE_TESTS_ALONE"


def ci_enforced() -> bool:
    """Whether this run fails skips for missing dependencies: ``CI`` is ``true`` (or ``1``, ``yes``)."""
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


def cpu_backends() -> list[str]:
    """The attention backends parity tests run on CPU: torch_sdpa, eager, and cpu_varlen where it can be built
    (under CI a missing wde-cpu-kernels raises, unless ``WDE_TESTS_ALONE`` says it is left out on purpose)."""
    try:
        from wde_cpu_kernels.attention import unavailable_reason
    except ImportError:  # a GPU machine running only the GPU tests; CI installs the kernels distribution
        if ci_enforced() and not os.environ.get(ALONE_VARIABLE):
            raise
        return ["torch_sdpa", "eager"]
    return ["torch_sdpa", "eager"] + (["cpu_varlen"] if unavailable_reason() is None else [])


CPU_BACKENDS = cpu_backends()  # what parity tests run on CPU: cpu_varlen too where it can be built


def proc_cpuinfo() -> dict[str, str]:
    """The last CPU's fields in /proc/cpuinfo (``flags``, ``vendor_id``, ...; all CPUs alike), read here independently
    of wde_core's reader, for tests of the rules wde draws from it; empty where there is no such file."""
    path = Path("/proc/cpuinfo")
    info = path.read_text(encoding="utf-8") if path.exists() else ""
    pairs = (line.split(":", 1) for line in info.splitlines() if ":" in line)
    return {key.strip(): value.strip() for key, value in pairs}


def proc_cpuinfo_flags() -> set[str]:
    """The flags line of /proc/cpuinfo as ``proc_cpuinfo`` reads it (not ``wde_core.plugin_api.cpu_flags``)."""
    return set(proc_cpuinfo().get("flags", "").split())


def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags as Linux lists them (``/proc/cpuinfo``); empty where there is no such file."""
    return frozenset(proc_cpuinfo_flags())
