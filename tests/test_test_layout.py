"""Where tests live: every plugin distribution with code has its own ``plugins/NAME/tests`` (run by nox through
``testpaths``), the repository has one conftest.py, and a plugin's tests import only public APIs: from wde_core
only ``wde_core`` and ``wde_core.plugin_api``, from another plugin only its ``public`` module."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# distributions without a tests/ folder of their own, and why
NO_TESTS = {
    "wde-data-parallel": "its executor is tested with the others in the core's tests/test_executors.py",
}
# the few non-public wde_core names plugin tests still need, (module, name) -> why
ALLOWED_CORE = {
    ("wde_core.cli.main", "cli"): "the `wde` click group, driven by CliRunner: wde_core exports no public name for it",
    ("wde_core.cli.main", "inspect"): "`wde inspect` as a click command, for CliRunner",
    ("wde_core.runtime.engine", "BatchError"): "the error a failed batch raises: not in wde_core.plugin_api",
    ("wde_core.attention.eager", "EagerAttention"): "the eager backend as the kernels' reference: not exported",
}


def distributions() -> dict[Path, set[str]]:
    """Each plugin distribution directory with code -> its top-level packages."""
    out = {}
    for pyproject in sorted(ROOT.glob("plugins/*/pyproject.toml")):
        packages = {p.parent.name for p in pyproject.parent.glob("wde_*/__init__.py")}
        if packages:
            out[pyproject.parent] = packages
    return out


def all_plugin_packages() -> set[str]:
    return {package for packages in distributions().values() for package in packages}


def bad_imports(path: Path, own: set[str], plugins: set[str]) -> list[str]:
    """``line: what`` for each import of ``path`` that is neither public nor its own plugin's."""
    problems = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            pairs = [(alias.name, None) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            pairs = [(node.module, alias.name) for alias in node.names]
        else:
            continue
        for module, name in pairs:
            top = module.split(".")[0]
            if top == "wde_core":
                if module in ("wde_core", "wde_core.plugin_api") or (module, name) in ALLOWED_CORE:
                    continue
                problems.append(f"{node.lineno}: {module}" + (f" import {name}" if name else ""))
            elif top in plugins and top not in own and top != "wde_plugin_kit":
                if module == f"{top}.public" or (module == top and name == "public"):
                    continue
                problems.append(f"{node.lineno}: {module}" + (f" import {name}" if name else ""))
    return problems


def test_every_plugin_with_code_has_its_own_tests():
    missing = []
    for directory in distributions():
        if directory.name in NO_TESTS:
            continue
        if not list((directory / "tests").glob("test_*.py")):
            missing.append(directory.name)
    assert not missing, f"plugins without plugins/NAME/tests/test_*.py: {missing}"
    stale = sorted(name for name in NO_TESTS if list((ROOT / "plugins" / name / "tests").glob("test_*.py")))
    assert not stale, f"NO_TESTS lists plugins that now have tests: {stale}"


def test_pytest_collects_the_plugin_tests():
    testpaths = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["testpaths"]
    assert "tests" in testpaths and "plugins" in testpaths


def test_there_is_one_conftest():
    found = sorted(str(p.relative_to(ROOT)) for p in ROOT.rglob("conftest.py")
                   if not any(part.startswith(".") for part in p.relative_to(ROOT).parts))
    assert found == ["conftest.py"]


@pytest.mark.parametrize("directory", sorted(distributions()), ids=lambda d: d.name)
def test_plugin_tests_import_only_public_apis(directory):
    own, plugins = distributions()[directory], all_plugin_packages()
    problems = {str(path.relative_to(ROOT)): bad for path in sorted((directory / "tests").glob("*.py"))
                if (bad := bad_imports(path, own, plugins))}
    assert not problems, ("plugin tests may import from wde_core only wde_core and wde_core.plugin_api, and from "
                          f"another plugin only its public module: {problems}")


def test_the_import_check_catches_a_private_import(tmp_path):
    sample = tmp_path / "test_x.py"
    sample.write_text("from wde_core.runtime.request import Request\nfrom wde_bert.model import BertEncoder\n"
                      "from wde_bert.public import BertLayer\nfrom wde_core import Engine\nimport wde_gemma.plugin\n"
                      "from wde_plugin_kit.packed import packed_diff\nfrom wde_core.cli.main import cli\n")
    assert bad_imports(sample, {"wde_gemma"}, all_plugin_packages()) == [
        "1: wde_core.runtime.request import Request", "2: wde_bert.model import BertEncoder"]
