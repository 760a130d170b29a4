"""Shallow plugin dependencies (issue 57): installing one model-family plugin pulls at most one other family
plugin (the one it extends, as wde-xlm-roberta extends wde-bert).

Every distribution's ``pyproject.toml`` (``plugins/*`` and the example under ``tests/plugins/*``) declares in
``[tool.wde]`` whether it is a ``family`` (serves a model family: wde-bert, wde-deberta, ...) or a
``capability`` (what several families or every engine share: wde-cross-encoder, wde-server, ...). From the
declared dependencies:

- family depth: the longest chain of family distributions a distribution pulls, itself included (a family on
  the core alone = 1, a capability adds nothing); at most 2 for every distribution;
- a capability depends on no family;
- depth: the longest chain of wde distributions (the core = 0, a plugin on the core alone = 1); at most 3;
- every ``wde-*`` dependency is a distribution of this checkout (``plugins/*``) or ``wde-core``.

``python tests/test_plugin_depth.py`` prints the table of depths; the test prints it too (``pytest -s``).
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CORE = "wde-core"
KINDS = ("family", "capability")
MAX_FAMILY_DEPTH = 2
MAX_DEPTH = 3


@dataclass(frozen=True)
class Distribution:
    """A wde distribution as its pyproject declares it: name, ``[tool.wde] kind`` and its wde dependencies."""

    name: str
    kind: str | None
    requires: tuple[str, ...]


def requirement_name(requirement: str) -> str:
    """The normalized distribution name of a requirement string (``"wde_bert>=0.1[x]"`` -> ``"wde-bert"``)."""
    return re.sub(r"[-_.]+", "-", re.match(r"\s*([\w.-]+)", requirement).group(1)).lower()


def read_distribution(pyproject: Path) -> Distribution:
    """The distribution a ``pyproject.toml`` declares (third-party dependencies left out)."""
    data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    names = (requirement_name(r) for r in data["project"].get("dependencies", []))
    kind = data.get("tool", {}).get("wde", {}).get("kind")
    return Distribution(name=requirement_name(data["project"]["name"]), kind=kind,
                        requires=tuple(sorted(n for n in names if n.startswith("wde-"))))


def checkout_distributions() -> dict[str, Distribution]:
    """Every plugin distribution of the checkout, by name."""
    pyprojects = [*ROOT.glob("plugins/*/pyproject.toml"), *ROOT.glob("tests/plugins/*/pyproject.toml")]
    return {d.name: d for d in map(read_distribution, sorted(pyprojects))}


def depths(dists: dict[str, Distribution]) -> dict[str, tuple[int, int]]:
    """``name -> (family depth, depth)`` of each distribution; a dependency that is not in ``dists`` (the core,
    or a name no distribution has) counts 0; a cycle raises ``ValueError`` naming it."""
    found: dict[str, tuple[int, int]] = {}

    def visit(name: str, path: tuple[str, ...]) -> tuple[int, int]:
        if name in path:
            raise ValueError("dependency cycle: " + " -> ".join(path[path.index(name):] + (name,)))
        if name not in dists:
            return 0, 0
        if name not in found:
            below = [visit(r, path + (name,)) for r in dists[name].requires] or [(0, 0)]
            own = 1 if dists[name].kind == "family" else 0
            found[name] = (own + max(f for f, _ in below), 1 + max(d for _, d in below))
        return found[name]

    for name in dists:
        visit(name, ())
    return found


def family_chain(dists: dict[str, Distribution], name: str) -> list[str]:
    """The longest chain of family distributions under ``name`` (``name`` first when it is a family)."""
    table = depths(dists)
    below = max((r for r in dists[name].requires if r in dists), key=lambda r: table[r][0], default=None)
    rest = family_chain(dists, below) if below is not None and table[below][0] else []
    return ([name] if dists[name].kind == "family" else []) + rest


def violations(dists: dict[str, Distribution]) -> list[str]:
    """Every broken rule, one line each (see the module docstring)."""
    problems = []
    table = depths(dists)
    for name, dist in sorted(dists.items()):
        if dist.kind not in KINDS:
            problems.append(f"{name}: [tool.wde] kind is {dist.kind!r}; declare one of {', '.join(KINDS)}")
        unknown = [r for r in dist.requires if r not in dists and r != CORE]
        if unknown:
            problems.append(f"{name}: depends on {', '.join(unknown)}, which no distribution of the checkout is")
        families = [r for r in dist.requires if r in dists and dists[r].kind == "family"]
        if dist.kind == "capability" and families:
            problems.append(f"{name}: a capability depends on the family plugin(s) {', '.join(families)}; move "
                            "what it needs into a capability distribution or the plugin API")
        family_depth, depth = table[name]
        if family_depth > MAX_FAMILY_DEPTH:
            problems.append(f"{name}: family depth {family_depth} > {MAX_FAMILY_DEPTH} "
                            f"({' -> '.join(family_chain(dists, name))})")
        if depth > MAX_DEPTH:
            problems.append(f"{name}: depth {depth} > {MAX_DEPTH}")
    return problems


def depth_table(dists: dict[str, Distribution]) -> str:
    """One row per distribution: name, kind, family depth, depth and its wde dependencies."""
    table = depths(dists)
    width = max(map(len, dists), default=0)
    rows = [f"{'distribution':<{width}}  {'kind':<10}  family  depth  requires"]
    for name, dist in sorted(dists.items(), key=lambda item: (-table[item[0]][0], -table[item[0]][1], item[0])):
        family_depth, depth = table[name]
        rows.append(f"{name:<{width}}  {dist.kind or '-':<10}  {family_depth:>6}  {depth:>5}  "
                    + ", ".join(r for r in dist.requires if r != CORE))
    return "\n".join(rows)


def test_the_checkouts_plugins_keep_their_dependencies_shallow():
    dists = checkout_distributions()
    assert {"wde-bert", "wde-cross-encoder", "wde-reranker", "wde-deberta", "wde-example"} <= set(dists)
    table = depth_table(dists)
    print("\n" + table)
    assert violations(dists) == [], table


def test_the_cross_encoders_stand_on_wde_cross_encoder():
    dists = checkout_distributions()
    table = depths(dists)
    assert dists["wde-cross-encoder"] == Distribution("wde-cross-encoder", "capability", (CORE,))
    assert set(dists["wde-reranker"].requires) == {CORE, "wde-bert", "wde-cross-encoder"}
    assert set(dists["wde-xlm-roberta"].requires) == {CORE, "wde-bert", "wde-cross-encoder"}
    for name in ("wde-deberta", "wde-modernbert", "wde-rope-encoders"):
        assert set(dists[name].requires) == {CORE, "wde-cross-encoder"} and table[name] == (1, 2), name
    assert table["wde-reranker"] == table["wde-xlm-roberta"] == (2, 2)


def graph(*rows: tuple[str, str, tuple[str, ...]]) -> dict[str, Distribution]:
    """A hand-built dependency graph: ``(name, kind, requires)`` rows, each on the core too."""
    return {name: Distribution(name, kind, (CORE, *requires)) for name, kind, requires in rows}


# the plugins as they stood before issue 57: wde-reranker on wde-xlm-roberta on wde-bert, wde-deberta on wde-reranker
OLD_CROSS_ENCODERS = graph(("wde-bert", "family", ()), ("wde-xlm-roberta", "family", ("wde-bert",)),
                           ("wde-reranker", "family", ("wde-bert", "wde-xlm-roberta")),
                           ("wde-deberta", "family", ("wde-reranker",)))


def test_the_old_reranker_chain_is_refused():
    assert {name: depth for name, (depth, _) in depths(OLD_CROSS_ENCODERS).items()} == {
        "wde-bert": 1, "wde-xlm-roberta": 2, "wde-reranker": 3, "wde-deberta": 4}
    assert violations(OLD_CROSS_ENCODERS) == [
        "wde-deberta: family depth 4 > 2 (wde-deberta -> wde-reranker -> wde-xlm-roberta -> wde-bert)",
        "wde-deberta: depth 4 > 3",
        "wde-reranker: family depth 3 > 2 (wde-reranker -> wde-xlm-roberta -> wde-bert)",
    ]


def test_capabilities_count_toward_depth_but_not_family_depth():
    dists = graph(("wde-a", "capability", ()), ("wde-b", "capability", ("wde-a",)),
                  ("wde-c", "family", ("wde-b",)), ("wde-d", "family", ("wde-c",)))
    assert depths(dists) == {"wde-a": (0, 1), "wde-b": (0, 2), "wde-c": (1, 3), "wde-d": (2, 4)}
    assert violations(dists) == ["wde-d: depth 4 > 3"]


@pytest.mark.parametrize(("rows", "expected"), [
    ((("wde-bert", "family", ()), ("wde-images", "capability", ("wde-bert",))),
     "wde-images: a capability depends on the family plugin(s) wde-bert; move what it needs into a capability "
     "distribution or the plugin API"),
    ((("wde-bert", None, ()),), "wde-bert: [tool.wde] kind is None; declare one of family, capability"),
    ((("wde-bert", "model", ()),), "wde-bert: [tool.wde] kind is 'model'; declare one of family, capability"),
    ((("wde-bert", "family", ()), ("wde-mpnet", "family", ("wde-bret",))),
     "wde-mpnet: depends on wde-bret, which no distribution of the checkout is"),
])
def test_each_rule_names_the_distribution_that_breaks_it(rows, expected):
    assert violations(graph(*rows)) == [expected]


def test_a_cycle_is_named():
    with pytest.raises(ValueError, match=r"dependency cycle: wde-a -> wde-b -> wde-a"):
        depths(graph(("wde-a", "family", ("wde-b",)), ("wde-b", "family", ("wde-a",))))


def test_requirement_names_are_normalized(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "wde_Example"\ndependencies = ["wde_core>=0.1", '
                                             '"WDE.Bert[x] >= 0.1", "torch==2.13.0"]\n[tool.wde]\nkind = "family"\n')
    assert read_distribution(tmp_path / "pyproject.toml") == Distribution("wde-example", "family",
                                                                          ("wde-bert", CORE))


if __name__ == "__main__":
    print(depth_table(checkout_distributions()))
    print("\n".join(violations(checkout_distributions())) or "no violations")
