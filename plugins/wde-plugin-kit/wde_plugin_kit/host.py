"""An in-process plugin host: load a plugin that is not installed, for the duration of a ``with`` block."""

from __future__ import annotations

import importlib
from contextlib import contextmanager
from types import ModuleType
from typing import Any, Iterator

from wde_core.plugin_api import PluginHost, get_plugin_host, reset_plugin_host


def _named(plugin: Any) -> tuple[str, Any]:
    """Turn a module, an import path or a ``(name, object)`` pair into ``(name, object)``."""
    if isinstance(plugin, tuple):
        if len(plugin) != 2 or not isinstance(plugin[0], str):
            raise TypeError(f"plugin pair must be (name, object), got {plugin!r}")
        return plugin
    if isinstance(plugin, str):
        plugin = importlib.import_module(plugin)
    if isinstance(plugin, ModuleType):
        return plugin.__name__.split(".", 1)[0].replace("_", "-"), plugin
    raise TypeError(f"plugin must be a module, an import path or a (name, object) pair, "
                    f"got {type(plugin).__name__}")


@contextmanager
def plugin_host(*plugins: Any, use_entry_points: bool = True) -> Iterator[PluginHost]:
    """Yield a loaded ``PluginHost`` holding ``plugins`` (modules, import paths or ``(name, object)`` pairs) as
    the process-wide host, restoring the previous one; ``use_entry_points=False`` loads only the core and them."""
    extra = [_named(p) for p in plugins]
    previous = get_plugin_host()
    host = PluginHost(use_entry_points=use_entry_points).load(extra_plugins=extra)
    reset_plugin_host(host)
    try:
        yield host
    finally:
        reset_plugin_host(previous)
