"""Plugin contracts that are hard to misuse: misspelt hooks, unknown tasks and defaults keys, the
public plugin API as the only import, cheap plugin loading, and the size limits of the code."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from wde_core.cli.main import cli
from wde_core.plugin_api import ArchitectureLink, Task, hookimpl

ROOT = Path(__file__).resolve().parents[1]
PLUGIN_SOURCES = [*ROOT.glob("plugins/*/wde_*/**/*.py"), *ROOT.glob("tests/plugins/*/wde_*/**/*.py")]


class MisspeltPlugin:
    """Implements ``wde_register_tokenizer`` (singular): not a wde hook."""

    @staticmethod
    @hookimpl
    def wde_register_tokenizer(register):
        register("never-seen", "wde_core.stages.tokenizer:HFTokenizer")


class UnknownTaskPlugin:
    """Links an architecture for a task nobody registered, and one with an unknown defaults key."""

    @staticmethod
    @hookimpl
    def wde_register_architectures(register):
        register(ArchitectureLink("FooModel", "summarize", "embed", "wde_bert.model:BertEncoder"))
        register(ArchitectureLink("BarModel", "embed", "embed", "wde_bert.model:BertEncoder",
                                  defaults={"pooling": "mean", "normalise": True}))


def test_a_misspelt_hook_is_a_reported_problem(register_plugin):
    host = register_plugin(("misspelt", MisspeltPlugin), use_entry_points=False)
    problems = [str(p) for p in host.problems]
    assert problems == ["misspelt: implements unknown hook(s) 'wde_register_tokenizer' (did you mean "
                        "'wde_register_tokenizers'?); plugin not loaded"]
    assert "never-seen" not in host.registry.components["tokenizer"] and "misspelt" not in host.plugins
    host.register_commands(cli)
    shown = CliRunner().invoke(cli, ["plugins"])
    assert "problem: misspelt: implements unknown hook(s) 'wde_register_tokenizer'" in shown.stderr
    checked = CliRunner().invoke(cli, ["list-workflows", "--check"])
    assert checked.exit_code == 1 and "wde_register_tokenizer" in checked.stderr
    listed = json.loads(CliRunner().invoke(cli, ["plugins", "--json"]).stdout)
    assert any("wde_register_tokenizer" in p for p in listed["problems"])


def test_links_name_registered_tasks_and_known_defaults(register_plugin):
    host = register_plugin(("typos", UnknownTaskPlugin), use_entry_points=False)
    problems = [str(p) for p in host.problems]
    assert problems[0] == ("typos: wde_register_architectures: architecture 'FooModel': unknown task 'summarize'; "
                           "registered tasks: classify, embed, rerank, token_classify, token_embed")
    assert problems[1].startswith("typos: wde_register_architectures: architecture 'BarModel': unknown defaults "
                                  "key(s) normalise; known: pooling, normalize")
    assert host.registry.links_for("FooModel") == [] and host.registry.links_for("BarModel") == []


def test_task_methods_are_unique_and_checked(register_plugin):
    class Clash:
        @staticmethod
        @hookimpl
        def wde_register_tasks(register):
            register(Task("embed-again", {"encode": "wde_core.tasks.embed:encode"}))
            register(Task("nothing", {}))
            register(Task("bad-path", {"summarize": "no_such_module:prepare"}))

    host = register_plugin(("clash", Clash), use_entry_points=False)
    problems = "\n".join(str(p) for p in host.problems)
    assert "method 'encode' is already served by task 'embed' of 'wde-core'" in problems
    assert "task 'nothing' names no front-end method" in problems
    assert "import path 'no_such_module:prepare' does not resolve" in problems
    assert set(host.registry.tasks) == {"embed", "token_embed", "rerank", "classify", "token_classify"}


def wde_core_imports(path: Path) -> set[str]:
    """The ``wde_core`` modules a source file imports."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "wde_core":
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == "wde_core")
    return found


def test_plugins_import_only_the_plugin_api():
    assert len(PLUGIN_SOURCES) > 20
    leaks = {str(p.relative_to(ROOT)): sorted(wde_core_imports(p) - {"wde_core.plugin_api"}) for p in PLUGIN_SOURCES}
    assert {path: modules for path, modules in leaks.items() if modules} == {}


PLUGIN_DIRS = [*ROOT.glob("plugins/*/pyproject.toml"), *ROOT.glob("tests/plugins/*/pyproject.toml")]
MODULE_PATH = re.compile(r"wde_\w+(\.\w+)*(:[\w.]+)?")  # "wde_xxx.module:Attr" or "wde_xxx.module"


def plugin_packages() -> dict[str, tuple[str, set[str]]]:
    """Each plugin package -> (its distribution, the distributions its ``pyproject.toml`` depends on)."""
    import tomllib

    packages = {}
    for pyproject in PLUGIN_DIRS:
        project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
        declared = {re.match(r"[\w.-]+", d).group(0).lower().replace("_", "-") for d in project["dependencies"]}
        for package in pyproject.parent.glob("wde_*/__init__.py"):
            packages[package.parent.name] = (project["name"], declared)
    return packages


def package_of(path: Path) -> str:
    """The plugin package a source file belongs to."""
    return next(part for part in path.relative_to(ROOT).parts if part.startswith("wde_"))


def other_plugin_references(path: Path, others: set[str]) -> list[tuple[int, str]]:
    """``(line, module)`` of each import of, and each ``"module:attr"`` string naming, a package in ``others``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and MODULE_PATH.fullmatch(node.value):
            names = [node.value.split(":")[0]]
        else:
            continue
        found += [(node.lineno, name) for name in names if name.split(".")[0] in others]
    return found


def test_plugins_import_other_plugins_only_through_a_declared_public_module():
    # a plugin builds on another only through a distribution it depends on, and only through that
    # distribution's declared public module (<package>/public.py): imports and "module:attr" strings alike
    packages = plugin_packages()
    assert {"wde_bert", "wde_server", "wde_example"} <= set(packages)
    wrong = []
    for path in PLUGIN_SOURCES:
        own = package_of(path)
        for line, name in other_plugin_references(path, set(packages) - {own}):
            package, where = name.split(".")[0], f"{path.relative_to(ROOT)}:{line}: {name}"
            if packages[package][0] not in packages[own][1]:
                wrong.append(f"{where}: {packages[package][0]} is not a dependency of {packages[own][0]}")
            elif name != f"{package}.public":
                wrong.append(f"{where}: not through {package}.public")
    assert wrong == []


def test_hookimpl_and_plugin_loading_import_no_torch():
    code = ("import sys\n"
            "from wde_core import hookimpl\n"
            "from wde_core.plugin_api import ArchitectureLink, Workflow, Task, EMBED_WORKFLOW\n"
            "assert 'torch' not in sys.modules, 'the plugin API imported torch'\n"
            "from wde_core.plugins.host import get_plugin_host\n"
            "host = get_plugin_host()\n"
            "assert {'wde-bert', 'wde-xlm-roberta', 'wde-reranker', 'wde-qwen2-bidir'} <= set(host.plugins)\n"
            "assert not host.problems, host.problems\n"
            "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"  # loading every plugin imported neither torch nor transformers


def docstring_lines(tree: ast.Module) -> set[int]:
    """Line numbers of the module's, classes' and functions' docstrings."""
    lines = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(
                    first.value.value, str):
                lines.update(range(first.lineno, first.end_lineno + 1))
    return lines


def code_lines(path: Path) -> int:
    """Lines of code as cloc and pygount count them: not blank, not a comment, not a docstring."""
    text = path.read_text(encoding="utf-8")
    documentation = docstring_lines(ast.parse(text))
    return sum(1 for number, line in enumerate(text.splitlines(), start=1)
               if line.strip() and not line.strip().startswith("#") and number not in documentation)


def test_code_lines_leave_out_blank_lines_comments_and_docstrings(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text('"""Module\ndocstring."""\n\n# a comment\nX = """not a docstring:\na string"""\n\n\n'
                      'def f():\n    """One line."""\n    return X  # counted\n', encoding="utf-8")
    assert code_lines(sample) == 4  # X = ... (two lines), def f():, return X


@pytest.mark.parametrize("requirement", ["torch>=2.5"])
def test_the_torch_floor_matches_the_code(requirement):
    # SdpaAttention calls scaled_dot_product_attention(enable_gqa=...), added in torch 2.5
    assert requirement in (ROOT / "pyproject.toml").read_text()
