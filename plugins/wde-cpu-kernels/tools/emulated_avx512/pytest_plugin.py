"""pytest plugin: wde-cpu-kernels' tests against the emulated AVX-512 build (``build.py``) on a CPU without AVX-512.

    WDE_EMULATED_AVX512=OUT_DIR/_varlen.so PYTHONPATH=tools/emulated_avx512 pytest -p pytest_plugin \\
        plugins/wde-cpu-kernels/tests -m "not slow"

The emulated module stands in for ``wde_cpu_kernels._varlen``, and torch's Python-side reading of the CPU says AVX512
with AVX512-BF16, so that ``kernel_isa``, ``bf16_products`` and the tests' ``build`` fixture take the AVX-512 paths
(AMX stays off: the module asks CPUID). Tests that probe the real CPU's oneDNN (``test_onednn_verbose.py``) are
deselected: oneDNN is not emulated."""

from __future__ import annotations

import importlib.util
import os
import sys

import torch

import wde_cpu_kernels


def _load_emulated_module() -> None:
    path = os.environ.get("WDE_EMULATED_AVX512")
    if not path or not os.path.isfile(path):
        raise RuntimeError(f"WDE_EMULATED_AVX512 names no built module ({path!r}): run build.py first")
    spec = importlib.util.spec_from_file_location("wde_cpu_kernels._varlen", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules["wde_cpu_kernels._varlen"] = module
    wde_cpu_kernels._varlen = module
    torch.backends.cpu.get_cpu_capability = lambda: "AVX512"
    torch.cpu._is_avx512_bf16_supported = lambda: True


_load_emulated_module()


def pytest_collection_modifyitems(config, items):
    """Deselect the tests that read the real CPU's oneDNN."""
    kept = [item for item in items if "test_onednn_verbose" not in item.nodeid]
    if len(kept) != len(items):
        config.hook.pytest_deselected(items=[item for item in items if item not in kept])
        items[:] = kept
