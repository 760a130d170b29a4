"""wde-server's public API for other plugins (wde-ray's ``wde serve-ray`` builds on it): :func:`create_app`, the
``wde serve`` app; :class:`ServerOptions`, its limits; :func:`server_options`, the command-line options of
``wde serve`` for another serving command; :func:`check_names`, their check of ``--served-model-name``.

Importing it is cheap: ``create_app`` imports FastAPI and the engine on first use.
"""

from __future__ import annotations

from typing import Any

from wde_server.cli import check_names, server_options
from wde_server.options import ServerOptions

__all__ = ["create_app", "ServerOptions", "server_options", "check_names"]


def __getattr__(name: str) -> Any:
    if name != "create_app":
        raise AttributeError(f"module 'wde_server.public' has no attribute {name!r}")
    from wde_server.app import create_app

    return create_app
