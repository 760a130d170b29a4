"""``wde rerank``: score documents against a query; JSON out, best first."""

from __future__ import annotations

import json
import os
from typing import Any

import click

from wde_batch.io import input_options, read_inputs
from wde_core.plugin_api import engine_arg_option, engine_error, parse_engine_args

NO_MODEL = ("wde rerank needs a cross-encoder model, and no installed plugin ships one: name one with -m, e.g. "
            "wde rerank -m cross-encoder/ms-marco-MiniLM-L-6-v2 QUERY DOCUMENT... (a model directory, or a hub id "
            "in the local Hugging Face cache), or set WDE_DEFAULT_MODEL")


@click.command("rerank")
@click.argument("arguments", nargs=-1, metavar="QUERY [DOCUMENTS]...")
@click.option("--query", default=None, help="The query, when the arguments are all documents.")
@click.option("-m", "--model", default=None, help="A cross-encoder directory or hub id.")
@input_options
@click.option("--top-n", type=int, default=None, help="Keep the best N documents.")
@click.option("--return-documents", is_flag=True, help="Include each document's text in the output.")
@click.option("--raw-scores", is_flag=True, help="Raw logits instead of sigmoid scores.")
@click.option("--truncate/--no-truncate", default=True, show_default=True,
              help="Cut over-long documents to the model's max length, or fail on them.")
@click.option("--device", default="auto", show_default=True)
@click.option("--dtype", default="auto", show_default=True)
@click.option("--num-threads", type=int, default=None, help="CPU threads for inference.")
@engine_arg_option
def rerank(arguments, query, model, input_file, input_format, column, encoding, top_n, return_documents, raw_scores,
           truncate, device, dtype, num_threads, engine_args) -> None:
    """Score DOCUMENTS (or --input FILE, or stdin lines) against QUERY; print a JSON list, best first."""
    from wde_core.plugin_api import Engine

    if query is None and not arguments:
        raise click.UsageError("give a query: wde rerank QUERY [DOCUMENTS]... (or --query QUERY)")
    query, documents = (query, arguments) if query is not None else (arguments[0], arguments[1:])
    if model is None and not os.environ.get("WDE_DEFAULT_MODEL"):
        raise click.ClickException(NO_MODEL)
    read = read_inputs(documents, input_file, input_format=input_format, column=column, encoding=encoding)
    docs, ids = read.items, read.ids
    args = {"device": device, "dtype": dtype, "num_threads": num_threads, **parse_engine_args(engine_args)}
    with engine_error(), Engine(model, **args) as engine:
        results = engine.rerank(query, docs, top_n=top_n, return_documents=return_documents,
                                raw_scores=raw_scores, truncate=truncate)
    click.echo(json.dumps([_with_id(r, ids) for r in results], ensure_ascii=False))


def _with_id(result: dict[str, Any], ids: list[Any] | None) -> dict[str, Any]:
    return result if ids is None else {"id": ids[result["index"]], **result}
