"""Registers ``wde plugin new``, the plugin-distribution scaffold."""

from __future__ import annotations

from wde_core.plugin_api import hookimpl


@hookimpl
def wde_register_commands(cli):
    """``wde plugin new NAME [--architecture ARCH] [--modality text|image] [--task TASK]``."""
    from wde_plugin_kit.scaffold import plugin

    cli.add_command(plugin)
