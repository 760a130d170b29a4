"""The wde-ray plugin: adds ``wde embed-dataset`` to the ``wde`` command line."""

from __future__ import annotations

from wde_core.plugin_api import hookimpl


@hookimpl
def wde_register_commands(cli):
    """``wde embed-dataset``."""
    from wde_ray.cli import embed_dataset

    cli.add_command(embed_dataset)
