"""``wde_core/plugins/hints.json`` is derived, not kept: which distribution of this repository serves each
architecture, provides each component and each command, computed from the plugins' own registrations. The core reads
it at run time to say which plugin to install when that plugin is not installed. Regenerate it with
``python tests/test_install_hints.py`` after a plugin links, registers or moves an architecture, component or
command; the test fails while the file is stale."""

from __future__ import annotations

import json
import sys
from importlib import metadata
from pathlib import Path

import click

ROOT = Path(__file__).resolve().parents[1]
HINTS = ROOT / "wde_core" / "plugins" / "hints.json"


def derived_hints(previous: dict) -> dict:
    """The table from every plugin distribution under ``plugins/``, loaded through its entry points: an architecture's
    distribution is the one linking it without a variant, else the one linking its variants. The entries of a
    distribution that is not installed here (wde-ray without ray) are kept from ``previous``."""
    from wde_core.plugin_api import PluginHost

    host = PluginHost().load()
    in_repo = {p.name for p in (ROOT / "plugins").iterdir() if (p / "pyproject.toml").exists()}
    dist = {name: info.distribution for name, info in host.plugins.items() if info.distribution in in_repo}
    absent = {d for d in in_repo if not _installed(d)}
    failed = in_repo - absent - set(dist.values()) - _without_hooks(in_repo - absent)
    assert not failed, f"plugin distributions here that did not load: {sorted(failed)}"
    links: dict[str, dict[bool, set[str]]] = {}
    for link in host.registry.links.values():
        if link.provider in dist:
            links.setdefault(link.architecture, {True: set(), False: set()})[not link.variant].add(dist[link.provider])
    architectures = {arch: _one(arch, by[True] or by[False]) for arch, by in links.items()}
    components: dict[str, set[str]] = {}
    for registered in host.registry.components.values():
        for name, component in registered.items():
            if component.provider in dist:
                components.setdefault(name, set()).add(dist[component.provider])
    commands: dict[str, set[str]] = {}
    for impl in host.pm.hook.wde_register_commands.get_hookimpls():
        if impl.plugin_name in dist:
            group = click.Group()
            impl.function(cli=group)
            for name in group.commands:
                commands.setdefault(name, set()).add(dist[impl.plugin_name])
    kept = {k: v for k, v in previous.items() if isinstance(v, str) and v in absent}
    for table, found in (("commands", commands), ("components", components)):
        found.update({k: {v} for k, v in previous.get(table, {}).items() if v in absent})
    return {**dict(sorted({**kept, **architectures}.items())),
            "commands": {name: _one(name, d) for name, d in sorted(commands.items())},
            "components": {name: _one(name, d) for name, d in sorted(components.items())}}


def _one(name: str, distributions: set[str]) -> str:
    assert len(distributions) == 1, f"{name} comes from several distributions here: {sorted(distributions)}"
    return next(iter(distributions))


def _installed(distribution: str) -> bool:
    try:
        metadata.distribution(distribution)
    except metadata.PackageNotFoundError:
        return False
    return True


def _without_hooks(installed: set[str]) -> set[str]:
    """Installed distributions here with no ``wde`` entry point (libraries other plugins build on)."""
    return {d for d in installed if not any(ep.group == "wde" for ep in metadata.distribution(d).entry_points)}


def test_the_install_hints_are_derived_from_the_plugins_here():
    kept = json.loads(HINTS.read_text(encoding="utf-8"))
    hints = derived_hints(kept)
    assert len(hints) > 40 and {"commands", "components"} <= set(hints)
    stale = kept != hints
    assert not stale, f"{HINTS.relative_to(ROOT)} is stale: regenerate it with python tests/test_install_hints.py"


if __name__ == "__main__":
    HINTS.write_text(json.dumps(derived_hints(json.loads(HINTS.read_text(encoding="utf-8"))), indent=2) + "\n",
                     encoding="utf-8")
    print(f"wrote {HINTS.relative_to(ROOT)}", file=sys.stderr)
