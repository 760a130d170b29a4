"""The core stays small and walkable: core + wde-bert within ``CODE_LINE_BUDGET`` lines of code (C/C++ under
``wde_core`` included; its history in docs/core-budget.md), no module over 300 lines, and no import cycle inside
``wde_core``."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from test_contracts import code_lines

ROOT = Path(__file__).resolve().parents[1]

# The budget's history, each rise with its reason, is docs/core-budget.md: a rise adds its reason there.
CODE_LINE_BUDGET = 3587
C_SOURCES = ("*.c", "*.cc", "*.cpp", "*.h", "*.hpp", "*.cu")


def c_code_lines(path: Path) -> int:
    """Lines of C/C++ code as cloc counts them: not blank, not a comment."""
    text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group().count("\n"), path.read_text(encoding="utf-8"), flags=re.S)
    return sum(1 for line in text.splitlines() if line.strip() and not line.strip().startswith("//"))


def test_c_code_lines_leave_out_blank_lines_and_comments(tmp_path):
    sample = tmp_path / "k.cpp"
    sample.write_text("// header\n#include <x>\n\n/* a\n   block */ \nint f() {  // counted\n  return 1;\n}\n")
    assert c_code_lines(sample) == 4


def test_modules_stay_small_and_core_plus_bert_stay_under_the_budget():
    modules = [*ROOT.glob("wde_core/**/*.py"), *ROOT.glob("plugins/*/wde_*/**/*.py")]
    assert {str(p.relative_to(ROOT)): n for p in modules if (n := len(p.read_text().splitlines())) > 300} == {}
    core_and_bert = [p for p in modules if "wde_core" in p.parts or "wde_bert" in p.parts]
    native = [p for pattern in C_SOURCES for p in ROOT.glob(f"wde_core/**/{pattern}")]
    total = sum(code_lines(p) for p in core_and_bert) + sum(c_code_lines(p) for p in native)
    print(f"core + wde-bert: {total} lines of code")
    assert total <= CODE_LINE_BUDGET


def module_name(path: Path) -> str:
    """``wde_core/plugins/host.py`` -> ``wde_core.plugins.host`` (a package's ``__init__`` is the package)."""
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(tree: ast.Module, modules: set[str]) -> set[str]:
    """The ``wde_core`` modules a module imports anywhere (in functions too, and by ``import_module("...")``)."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            found |= {f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in modules} \
                or {node.module}
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) == "import_module":
            found |= {a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)}
    return found & modules


def import_graph() -> dict[str, set[str]]:
    """Each ``wde_core`` module and the ``wde_core`` modules it imports."""
    paths = {module_name(p): p for p in ROOT.glob("wde_core/**/*.py")}
    return {name: imported_modules(ast.parse(path.read_text(encoding="utf-8")), set(paths)) - {name}
            for name, path in paths.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every import cycle, each once, as the list of modules around it (depth-first search)."""
    found, done = [], set()

    def visit(node: str, path: list[str]) -> None:
        for target in sorted(graph[node]):
            if target in path:
                cycle = path[path.index(target):]
                if frozenset(cycle) not in done:
                    done.add(frozenset(cycle))
                    found.append(cycle + [target])
            else:
                visit(target, path + [target])

    for start in sorted(graph):
        visit(start, [start])
    return found


def test_the_cycle_finder_finds_cycles():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_inside_wde_core():
    graph = import_graph()
    assert len(graph) > 40 and "wde_core.plugins.host" in graph["wde_core.cli.main"]
    assert "wde_core.builtin" in graph["wde_core.plugins.host"]  # imported by name, counted all the same
    assert cycles(graph) == []


def test_the_stages_and_tasks_do_not_import_the_engines_back():
    """The layers, each importing only those below: runtime (the engines) -> tasks -> stages."""
    graph = import_graph()
    above = {"wde_core.stages": ("wde_core.runtime", "wde_core.tasks"), "wde_core.tasks": ("wde_core.runtime",)}
    upward = {module: sorted(t for t in targets if t.startswith(above[layer]))
              for layer in above for module, targets in graph.items() if module.startswith(layer)}
    assert len(upward) > 15 and {module: found for module, found in upward.items() if found} == {}
