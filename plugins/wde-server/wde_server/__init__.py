"""wde-server: ``wde serve`` and :func:`create_app`, the HTTP front end of wde engines.

Importing the package is cheap (the plugin's entry point loads it with every ``wde`` command):
``create_app`` and ``ServerOptions`` import FastAPI and the engine on first use.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"
__all__ = ["create_app", "ServerOptions", "ServedModel"]

_HOMES = {"create_app": "wde_server.app", "ServerOptions": "wde_server.options", "ServedModel": "wde_server.models"}


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'wde_server' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(_HOMES[name]), name)
