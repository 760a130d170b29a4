"""The wde-ray plugin: adds ``wde embed-dataset`` and ``wde serve-ray`` to the ``wde`` command line."""

from __future__ import annotations

from wde_core.plugin_api import hookimpl


@hookimpl
def wde_register_commands(cli):
    """``wde embed-dataset`` and ``wde serve-ray``."""
    from wde_ray.cli import embed_dataset, serve_ray

    cli.add_command(embed_dataset)
    cli.add_command(serve_ray)
