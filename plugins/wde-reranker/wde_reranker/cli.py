"""``wde rerank``: score documents against a query; JSON out, best first."""

from __future__ import annotations

import json
from typing import Any

import click

from wde_core.plugin_api import read_inputs


@click.command("rerank")
@click.argument("documents", nargs=-1)
@click.option("-q", "--query", required=True, help="The query the documents are scored against.")
@click.option("-m", "--model", default=None, help="A cross-encoder directory or hub id.")
@click.option("-i", "--input", "input_file", default=None, help=".txt (one document per line) or .jsonl ('text').")
@click.option("--top-n", type=int, default=None, help="Keep the best N documents.")
@click.option("--return-documents", is_flag=True, help="Include each document's text in the output.")
@click.option("--raw-scores", is_flag=True, help="Raw logits instead of sigmoid scores.")
@click.option("--truncate/--no-truncate", default=True, show_default=True,
              help="Cut over-long documents to the model's max length, or fail on them.")
@click.option("--device", default="auto", show_default=True)
@click.option("--dtype", default="auto", show_default=True)
@click.option("--num-threads", type=int, default=None, help="CPU threads for inference.")
def rerank(documents, query, model, input_file, top_n, return_documents, raw_scores, truncate, device, dtype,
           num_threads) -> None:
    """Score DOCUMENTS (or --input FILE, or stdin lines) against --query; print a JSON list, best first."""
    from wde_core.plugin_api import Engine

    docs, ids = read_inputs(documents, input_file)
    try:
        with Engine(model, device=device, dtype=dtype, num_threads=num_threads) as engine:
            results = engine.rerank(query, docs, top_n=top_n, return_documents=return_documents,
                                    raw_scores=raw_scores, truncate=truncate)
    except (LookupError, ValueError, TypeError, OSError) as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(json.dumps([_with_id(r, ids) for r in results], ensure_ascii=False))


def _with_id(result: dict[str, Any], ids: list[Any] | None) -> dict[str, Any]:
    return result if ids is None else {"id": ids[result["index"]], **result}
