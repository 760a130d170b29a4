"""Lazy module exports: names resolved from their modules on first use, so importing is cheap."""

from __future__ import annotations

import importlib
from typing import Any, Callable, Mapping


def lazy_exports(namespace: dict, modules: Mapping[str, tuple[str, ...]]) -> tuple[list[str], Callable, Callable]:
    """``(__all__, __getattr__, __dir__)`` for a module exporting ``{module: (names...)}`` lazily."""
    exports = {name: module for module, names in modules.items() for name in names}

    def __getattr__(name: str) -> Any:
        if name not in exports:
            raise AttributeError(f"module {namespace['__name__']!r} has no attribute {name!r}")
        value = namespace[name] = getattr(importlib.import_module(exports[name]), name)
        return value

    def __dir__() -> list[str]:
        return sorted(exports) + [n for n in ("__version__",) if n in namespace]

    return sorted(exports), __getattr__, __dir__
