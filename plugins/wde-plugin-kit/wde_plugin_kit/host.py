"""An in-process plugin host: load a plugin that is not installed, for the duration of a ``with`` block."""

from __future__ import annotations

import importlib
from contextlib import contextmanager
from types import ModuleType
from typing import Any, Iterator

from wde_core.plugin_api import PluginHost, get_plugin_host, reset_plugin_host


class PluginProblemError(RuntimeError):
    """``plugin_host`` was given a plugin the host refused or reported; ``problems`` holds the host's reports."""

    def __init__(self, problems: list) -> None:
        self.problems = problems
        super().__init__("plugin_host: problem(s) with the plugin(s) it was given (allow_problems=True yields the "
                         "host anyway, to inspect host.problems):\n"
                         + "\n".join(f"  {p.plugin}: {p.message}" for p in problems))


def _named(plugin: Any) -> tuple[str, Any]:
    """Turn a module, an import path or a ``(name, object)`` pair into ``(name, object)``."""
    if isinstance(plugin, tuple):
        if len(plugin) != 2 or not isinstance(plugin[0], str):
            raise TypeError(f"plugin pair must be (name, object), got {plugin!r}")
        return plugin
    if isinstance(plugin, str):
        try:
            plugin = importlib.import_module(plugin)
        except ImportError as exc:
            raise ImportError(f"plugin_host: cannot import plugin module {plugin!r}: {exc}") from exc
    if isinstance(plugin, ModuleType):
        return plugin.__name__.split(".", 1)[0].replace("_", "-"), plugin
    raise TypeError(f"plugin must be a module, an import path or a (name, object) pair, "
                    f"got {type(plugin).__name__}")


def check_given_plugins(host: PluginHost, names: list[str]) -> None:
    """Raise ``PluginProblemError`` when the host reported a problem with a plugin named in ``names`` (problems
    of other installed plugins are left alone)."""
    problems = [p for p in host.problems if p.plugin in names]
    if problems:
        raise PluginProblemError(problems)


@contextmanager
def plugin_host(*plugins: Any, use_entry_points: bool = True, allow_problems: bool = False) -> Iterator[PluginHost]:
    """Yield a loaded ``PluginHost`` holding ``plugins`` (modules, import paths or ``(name, object)`` pairs) as
    the process-wide host, restoring the previous one; ``use_entry_points=False`` loads only the core and them.
    A problem with one of ``plugins`` raises ``PluginProblemError`` unless ``allow_problems=True``."""
    extra = [_named(p) for p in plugins]
    host = PluginHost(use_entry_points=use_entry_points).load(extra_plugins=extra)
    if not allow_problems:
        check_given_plugins(host, [name for name, _ in extra])
    previous = get_plugin_host()
    reset_plugin_host(host)
    try:
        yield host
    finally:
        reset_plugin_host(previous)
