"""The builds of wde-cpu-kernels' compiled module this CPU runs, for its tests: ``_varlen`` (AVX-512) and
``_varlen_avx2`` (AVX2 + FMA; every AVX-512 CPU runs it too, so CI on any x86 CPU checks it). A CPU without them is
the hardware, as no GPU is: the only skip. Imported by each test module (a ``conftest.py`` here would shadow the
repository's root ``conftest`` module)."""

from __future__ import annotations

import importlib

import pytest
import torch

from wde_cpu_kernels import attention

MODULES = {"AVX512": "_varlen", "AVX2": "_varlen_avx2"}
CAPABILITY = torch.backends.cpu.get_cpu_capability()
HAS_KERNEL = "AVX512" in CAPABILITY or CAPABILITY == "AVX2"  # read by torch, independently of kernel_isa
needs_kernel = pytest.mark.skipif(not HAS_KERNEL, reason="neither AVX-512 nor AVX2 on this CPU (hardware)")


def runs(isa: str) -> bool:
    """Whether this CPU runs the ``isa`` build."""
    return "AVX512" in CAPABILITY if isa == "AVX512" else HAS_KERNEL


def load_build(isa: str):
    """The ``isa`` build's module; the test skipped where the CPU lacks its ISA (hardware)."""
    if not runs(isa):
        pytest.skip(f"no {isa} on this CPU (hardware)")
    return importlib.import_module(f"wde_cpu_kernels.{MODULES[isa]}")


@pytest.fixture(params=list(MODULES))
def build(request, monkeypatch):
    """Each build this CPU runs in turn, as the one ``varlen_kernel`` (and so ``cpu_varlen`` and the int8 layers)
    uses for the test; skipped where the CPU lacks its ISA (hardware)."""
    module = load_build(request.param)
    monkeypatch.setattr(attention, "varlen_kernel", lambda: module)
    return module


@pytest.fixture(autouse=True)
def int8_past_float_rows(monkeypatch):
    """Where this CPU's rule runs every int8 batch in the model's dtype (``int8.cpu_float_below_rows``: a CPU that
    splits 256-bit vectors in halves, AMD Zen 1), a test module that imports this runs with
    ``WDE_INT8_FLOAT_BELOW_ROWS`` at ``FLOAT_BELOW_ROWS``, so that its batches of more rows still test int8 (subprocesses
    inherit it); elsewhere the rule as shipped."""
    from wde_cpu_kernels import int8

    if int8.cpu_float_below_rows() == int8.ALWAYS_FLOAT:
        monkeypatch.setenv(int8.FLOAT_BELOW_ROWS_VARIABLE, str(int8.FLOAT_BELOW_ROWS))
