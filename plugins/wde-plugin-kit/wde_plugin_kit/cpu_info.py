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
    """The attention backends parity tests run on CPU: torch_sdpa, eager, and cpu_varlen where a plugin's
    ``wde_select_attention_backend`` picks it for float32 on this CPU (wde-cpu-kernels where its kernel loads), asked
    through the plugin host as assembly asks it. Under CI a missing wde-cpu-kernels raises, unless
    ``WDE_TESTS_ALONE`` says it is left out on purpose."""
    import torch

    from wde_core.plugin_api import get_plugin_host

    host = get_plugin_host()
    if "wde-cpu-kernels" not in host.plugins and ci_enforced() and not os.environ.get(ALONE_VARIABLE):
        raise ImportError("wde-cpu-kernels is not installed: CI runs cpu_varlen's parity tests (set "
                          f"{ALONE_VARIABLE}=1 where it is left out on purpose)")
    answer = host.hook.wde_select_attention_backend(device=torch.device("cpu"), dtype=torch.float32, causal=False)
    return ["torch_sdpa", "eager"] + (["cpu_varlen"] if answer and answer[0] == "cpu_varlen" else [])


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
