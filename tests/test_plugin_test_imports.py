"""A plugin's tests run alone, in a virtualenv holding only that plugin and what it declares: so they import only
its own packages, its declared dependencies' packages (read from the pyprojects at run time, through other plugins'
pyprojects transitively, its ``test`` extra included), ``wde_core`` (the user API, ``from wde_core import Engine``)
and ``wde_core.plugin_api``, ``wde_plugin_kit``, the modules of its own tests folder, the stdlib and the references
(any other top-level module that is neither a ``wde_*`` package nor ``conftest``); from the core's internals only
the few names ``test_test_layout.ALLOWED_CORE`` lists with their reasons. The modules a tests folder holds
besides its tests are imported by name (pytest puts each tests folder, which has no ``__init__.py``, on
``sys.path``), so their names are unique across the plugins."""

from __future__ import annotations

import ast
import tomllib
from collections import Counter
from pathlib import Path

import pytest
from test_plugin_depth import requirement_name
from test_test_layout import ALLOWED_CORE

ROOT = Path(__file__).resolve().parents[1]
CORE = "wde-core"
CORE_MODULES = ("wde_core", "wde_core.plugin_api")  # what a plugin's tests may import of the core
KIT = "wde_plugin_kit"


def plugin_projects() -> dict[str, Path]:
    """Each plugin distribution's name (as its pyproject spells it) -> its directory."""
    return {tomllib.loads(p.read_text())["project"]["name"]: p.parent
            for p in sorted(ROOT.glob("plugins/*/pyproject.toml"))}


def declared(directory: Path, *, with_tests: bool) -> set[str]:
    """The distributions ``directory``'s pyproject depends on (with its ``test`` extra when ``with_tests``)."""
    project = tomllib.loads((directory / "pyproject.toml").read_text())["project"]
    requirements = list(project.get("dependencies", []))
    if with_tests:
        requirements += project.get("optional-dependencies", {}).get("test", [])
    return {requirement_name(r) for r in requirements}


def reachable(directory: Path, projects: dict[str, Path]) -> set[str]:
    """Every distribution a plugin's tests may see installed: its declared ones, through other plugins' pyprojects."""
    found, todo = set(), sorted(declared(directory, with_tests=True))
    while todo:
        name = todo.pop()
        if name in found:
            continue
        found.add(name)
        if name in projects:
            todo += sorted(declared(projects[name], with_tests=False))
    return found


def packages_of(directory: Path) -> set[str]:
    """The top-level ``wde_*`` packages a plugin distribution's directory holds."""
    return {p.parent.name for p in directory.glob("wde_*/__init__.py")}


def allowed_packages(directory: Path, projects: dict[str, Path]) -> set[str]:
    """The ``wde_*`` packages a plugin's tests may import: its own, its reachable distributions', the kit."""
    allowed = packages_of(directory) | {KIT}
    for name in reachable(directory, projects):
        allowed |= packages_of(projects[name]) if name in projects else {name.replace("-", "_")}
    return allowed - {"wde_core"}


def imported_modules(path: Path) -> list[tuple[int, str, str | None]]:
    """``(line, module, name)`` for each absolute import of ``path`` (``name`` for ``from module import name``)."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name, None) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out += [(node.lineno, node.module, alias.name) for alias in node.names]
    return out


def violations(path: Path, allowed: set[str], local: set[str]) -> list[str]:
    """``line: module`` for each import of ``path`` a plugin's tests may not make (``allowed``: its ``wde_*``
    packages; ``local``: its tests folder's modules)."""
    problems = []
    for line, module, name in imported_modules(path):
        top = module.split(".")[0]
        if top == "wde_core":
            full = f"{module}.{name}" if name and module == "wde_core" and name == "plugin_api" else module
            ok = full in CORE_MODULES or (module, name) in ALLOWED_CORE  # the few private names, with reasons
        elif top == "conftest":
            ok = False
        elif top.startswith("wde_"):
            ok = top in allowed
        else:
            ok = True  # its tests folder's modules, the stdlib, the references
        if not ok and top not in local:
            problems.append(f"{line}: {module}" + (f" import {name}" if name else ""))
    return problems


def files_under_tests(directory: Path) -> list[Path]:
    """Every Python file under a plugin's tests folder."""
    return sorted((directory / "tests").rglob("*.py"))


@pytest.mark.parametrize("directory", sorted(plugin_projects().values()), ids=lambda d: d.name)
def test_a_plugins_tests_import_only_what_it_may_use_alone(directory):
    projects = plugin_projects()
    allowed, local = allowed_packages(directory, projects), {p.stem for p in files_under_tests(directory)}
    problems = {str(path.relative_to(ROOT)): bad for path in files_under_tests(directory)
                if (bad := violations(path, allowed, local))}
    for where, bad in problems.items():
        print(where, *bad, sep="\n  ")
    assert not problems, (f"{directory.name}'s tests import what its pyproject does not declare (dependencies or "
                          f"the test extra), from the core more than wde_core / wde_core.plugin_api, or the root "
                          f"conftest: {problems}")


def test_support_module_names_are_unique_across_plugins():
    names = Counter(p.stem for directory in plugin_projects().values() for p in files_under_tests(directory)
                    if not p.stem.startswith("test_"))
    assert [name for name, count in names.items() if count > 1] == []


def test_the_check_catches_what_a_plugin_alone_lacks(tmp_path):
    plugin = tmp_path / "plugins" / "wde-toy"
    (plugin / "wde_toy").mkdir(parents=True)
    (plugin / "wde_toy" / "__init__.py").write_text("")
    (plugin / "pyproject.toml").write_text('[project]\nname = "wde-toy"\ndependencies = ["wde-core>=0.1", "wde-bert"]\n'
                                          '[project.optional-dependencies]\ntest = ["wde-clip", "httpx"]\n')
    projects = {**plugin_projects(), "wde-toy": plugin}
    sample = plugin / "tests" / "test_x.py"
    sample.parent.mkdir()
    sample.write_text("import os\nimport torch\nfrom conftest import save_random_bert\nfrom wde_core import Engine\n"
                      "from wde_core.plugin_api import Request\nfrom wde_core.runtime.request import Request\n"
                      "from wde_core import plugin_api\nfrom wde_core.cli.main import cli\nimport wde_toy.plugin\nfrom wde_bert.public import BertLayer\n"
                      "from wde_clip import public\nfrom wde_gemma.public import GemmaLayer\n"
                      "from wde_plugin_kit.encoders import save_random_bert\nfrom toy_builders import build\n")
    allowed = allowed_packages(plugin, projects)
    assert {"wde_toy", "wde_bert", "wde_clip", KIT} <= allowed and "wde_gemma" not in allowed
    assert violations(sample, allowed, {"toy_builders", "test_x"}) == [
        "3: conftest import save_random_bert", "6: wde_core.runtime.request import Request",
        "12: wde_gemma.public import GemmaLayer"]
