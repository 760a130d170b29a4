"""``wde example-hello``: greets and lists what the example plugin registered."""

from __future__ import annotations

import click

from wde_example import __version__

PLUGIN_NAME = "wde-example"


def provided_by(provider: str) -> list[str]:
    """Describe every registry entry ``provider`` registered, as ``kind name`` strings."""
    from wde_core.plugin_api import get_plugin_host

    registry = get_plugin_host().registry
    found = [f"workflow {wf.name}" for wf in registry.workflows.values() if wf.provider == provider]
    found += [f"{stage} {c.name}" for stage, table in registry.components.items()
              for c in table.values() if c.provider == provider]
    found += [f"architecture {link.architecture}[{link.task}]" for link in registry.links.values()
              if link.provider == provider]
    return sorted(found)


@click.command("example-hello")
@click.option("--name", default="world", show_default=True, help="Whom to greet.")
def example_hello(name: str) -> None:
    """Say hello and list what the wde-example plugin registered."""
    click.echo(f"hello, {name}! {PLUGIN_NAME} {__version__} provides:")
    for entry in provided_by(PLUGIN_NAME):
        click.echo(f"  {entry}")
