"""Registers ``wde encode`` and ``wde rerank``."""

from __future__ import annotations

from wde_core.plugin_api import hookimpl


@hookimpl
def wde_register_commands(cli):
    """``wde encode`` (embeddings) and ``wde rerank`` (documents scored against a query)."""
    from wde_batch.encode import encode
    from wde_batch.rerank import rerank

    cli.add_command(encode)
    cli.add_command(rerank)
