"""The wde-server plugin: adds ``wde serve`` to the ``wde`` command line."""

from __future__ import annotations

from wde_core.plugin_api import hookimpl


@hookimpl
def wde_register_commands(cli):
    """``wde serve``."""
    from wde_server.cli import serve

    cli.add_command(serve)
