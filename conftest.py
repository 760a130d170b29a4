"""The one conftest (tests/ and every plugins/*/tests): the CI-skip hooks and helpers of the core's tests. The
builders, reference data and fixtures tests share live in wde_plugin_kit (its ``pytest11`` entry point loads
``wde_plugin_kit.pytest_fixtures`` wherever the kit is installed); a plugin's own builders in its tests folder."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from wde_plugin_kit.cpu_info import ci_enforced, cpu_flags

# the kit's helpers the core's tests (tests/) import from here
from wde_plugin_kit.corpus import cosines, minilm_path, wiki_paragraphs  # noqa: F401
from wde_plugin_kit.cpu_info import CPU_BACKENDS, proc_cpuinfo, proc_cpuinfo_flags  # noqa: F401
from wde_plugin_kit.decoders import save_random_reranker  # noqa: F401
from wde_plugin_kit.encoders import (TOKENIZER_FILES, save_bert_classifier, save_random_bert,  # noqa: F401
                                     save_random_xlmr)
from wde_plugin_kit.image_builders import random_images, save_random_clip  # noqa: F401
from wde_plugin_kit.vision_language import save_random_colqwen2  # noqa: F401


def auto_cpu_backend() -> tuple[str, str, str]:
    """(name, target, reason) of the attention backend chosen on CPU in float32: cpu_varlen where the kernel
    loads (its AVX-512 or AVX2 build), else torch_sdpa with the kernel's reason."""
    from wde_cpu_kernels.attention import kernel_isa, unavailable_reason, varlen_kernel

    if varlen_kernel() is not None:
        return ("cpu_varlen", "wde_cpu_kernels.attention:NativeCpuAttention",
                f"auto: wde's {kernel_isa()} varlen kernel on cpu with float32")
    return ("torch_sdpa", "wde_core.attention.sdpa:SdpaAttention",
            f"auto: torch_sdpa on cpu with float32 (cpu_varlen: {unavailable_reason()})")


def provider_of(target: str) -> str:
    """The plugin that registers a core or wde-cpu-kernels component, from its import path."""
    return "wde-cpu-kernels" if target.startswith("wde_cpu_kernels.") else "wde-core"


# --- CI=true: no silent skips ---------------------------------------------------------------------------------
# Under CI (.ci/run exports CI=true) a test skipped for a missing dependency or toolchain FAILS: a tier must not
# pass because something was not installed. Only a skip for hardware this machine lacks stays a skip: its reason
# names CUDA or GPUs ("needs a CUDA device", "needs 2 CUDA devices") or AVX-512, and the machine really has no
# (or too few) CUDA devices / no AVX-512. A reason naming hardware that is present was about something else
# ("needs CUDA and flash-attn" on a CUDA machine means flash-attn is missing; "needs an AVX-512 CPU, a C++
# compiler and ninja" on an AVX-512 CPU means the toolchain is missing): those fail.
CI_SKIP_MESSAGE = "CI=true: skipped for a missing dependency: {reason}"


def missing_hardware(reason: str) -> bool:
    """Whether a skip's ``reason`` names hardware this machine lacks: ``N`` CUDA devices or GPUs, a CUDA device
    (or GPU), a CPU with AMX-BF16, AVX512-BF16, AVX2 (or AVX-512), AVX-512."""
    import torch

    text = reason.lower()
    if count := re.search(r"(\d+) (?:cuda devices|gpus)\b", text):
        return torch.cuda.device_count() < int(count.group(1))
    if "cuda" in text or "gpu" in text:
        return not torch.cuda.is_available()
    if "amx" in text:
        return not {"amx_bf16", "amx_tile"} <= cpu_flags()
    if "avx512-bf16" in text or "avx512_bf16" in text:
        return "avx512_bf16" not in cpu_flags()
    capability = torch.backends.cpu.get_cpu_capability()
    if re.search(r"\b(?:no|nor) avx2\b", text):  # "neither AVX-512 nor AVX2", "no AVX2": the AVX2 build cannot run
        return "AVX512" not in capability and capability != "AVX2"
    if "avx-512" in text or "avx512" in text:
        return "AVX512" not in capability
    return False


def _skip_reason(report) -> str:
    longrepr = report.longrepr  # a skip's is (path, line, "Skipped: reason")
    reason = str(longrepr[2]) if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
    return reason.removeprefix("Skipped: ")


def _fail_dependency_skip(report) -> None:
    """Turn ``report`` (a test's or a collector's) into a failure when CI=true and it skipped for anything but
    missing hardware (an xfail, also reported as skipped, is left alone)."""
    if not report.skipped or hasattr(report, "wasxfail") or not ci_enforced():
        return
    reason = _skip_reason(report)
    if not missing_hardware(reason):
        report.outcome = "failed"
        report.longrepr = CI_SKIP_MESSAGE.format(reason=reason)


def module_marks(path: Path) -> set[str]:
    """The marker names of a module's top-level ``pytestmark``, read from its source (a module that skips at
    import never gets as far as a module object)."""
    marks: set[str] = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        targets = (node.targets if isinstance(node, ast.Assign)
                   else [node.target] if isinstance(node, ast.AnnAssign) else [])
        if any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in targets) and node.value is not None:
            marks |= {sub.attr for sub in ast.walk(node.value) if isinstance(sub, ast.Attribute)
                      and isinstance(sub.value, ast.Attribute) and sub.value.attr == "mark"}
    return marks


def deselected_by_module_marks(collector) -> bool:
    """Whether ``-m`` leaves out every test of ``collector`` (a module) by its ``pytestmark``: then a skip at its
    import skips nothing this run would run (the tests and slow sessions collect test_ray.py, marked ``ray``,
    without Ray installed; the tests session the ``slow`` GGUF modules without gguf)."""
    from _pytest.mark.expression import Expression

    expression, path = collector.config.option.markexpr, getattr(collector, "path", None)
    if not expression or path is None or path.suffix != ".py" or not path.is_file():
        return False
    marks = module_marks(path)
    return not Expression.compile(expression).evaluate(lambda name, **kwargs: name in marks)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    """CI=true: a test skipped (in setup, call or teardown) for a missing dependency fails."""
    report = yield
    _fail_dependency_skip(report)
    return report


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_make_collect_report(collector):
    """CI=true: a module skipped at import (``importorskip``, ``allow_module_level``) for a missing dependency is
    a collection error, unless ``-m`` deselects all of it anyway."""
    report = yield
    if report.skipped and not deselected_by_module_marks(collector):
        _fail_dependency_skip(report)
    return report
