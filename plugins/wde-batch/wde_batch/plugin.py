"""Registers ``wde encode``, ``wde rerank`` and ``wde classify-tokens``."""

from __future__ import annotations

from wde_core.plugin_api import hookimpl


@hookimpl
def wde_register_commands(cli):
    """``wde encode`` (embeddings), ``wde rerank`` (documents scored against a query) and ``wde classify-tokens``
    (token classification: NER, PII)."""
    from wde_batch.classify_tokens import classify_tokens
    from wde_batch.encode import encode
    from wde_batch.rerank import rerank

    cli.add_command(encode)
    cli.add_command(rerank)
    cli.add_command(classify_tokens)
