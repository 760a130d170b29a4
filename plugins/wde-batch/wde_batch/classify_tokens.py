"""``wde classify-tokens``: token classification (NER, PII) of texts from arguments, a file or stdin; JSON lines out,
one record per text: its entities grouped as transformers' token-classification pipeline groups them, or every
token with its offsets, label and score."""

from __future__ import annotations

import os

import click

from wde_batch.images import renamed
from wde_batch.io import input_options, output_format, read_inputs, write_outputs
from wde_core.plugin_api import engine_arg_option, engine_error, parse_engine_args

NO_MODEL = ("wde classify-tokens needs a token-classification model (NER, PII), and no installed plugin ships one: "
            "name one with -m, e.g. wde classify-tokens -m dslim/bert-base-NER \"My name is Wolfgang\" (a model "
            "directory, or a hub id in the local Hugging Face cache), or set WDE_DEFAULT_MODEL")
TOKEN_FIELDS = ("tokens", "offsets", "labels", "scores")


@click.command("classify-tokens")
@click.argument("texts", nargs=-1)
@click.option("-m", "--model", default=None, help="A token-classification model directory or hub id.")
@input_options
@click.option("-o", "--output", default=None, help="Write to FILE (.jsonl or .json); JSON lines on stdout when "
              "omitted.")
@click.option("--aggregation", type=click.Choice(["simple", "first", "average", "max", "none", "tokens"]),
              default="simple", show_default=True,
              help="How word pieces group into entities (transformers' aggregation_strategy); 'tokens': every "
                   "token with its offsets, label and score.")
@click.option("--stride", type=int, default=None,
              help="Run a text longer than the model's max length in windows overlapping by N tokens.")
@click.option("--ignore-label", "ignore_labels", multiple=True,
              help="Leave out entities with this label (repeatable; default: O).")
@click.option("--logits", is_flag=True, help="With --aggregation tokens: each token's logits too.")
@click.option("--truncate/--no-truncate", default=None,
              help="Cut an over-long text to the model's max length, or fail on it (default: cut, unless --stride).")
@click.option("--device", default="auto", show_default=True)
@click.option("--dtype", default="auto", show_default=True)
@click.option("--num-threads", type=int, default=None, help="CPU threads for inference.")
@engine_arg_option
def classify_tokens(texts, model, input_file, input_format, column, encoding, output, aggregation, stride,
                    ignore_labels, logits, truncate, device, dtype, num_threads, engine_args) -> None:
    """Label the tokens of TEXTS (or --input FILE, or stdin lines): one JSON record per text."""
    from wde_core.plugin_api import Engine

    fmt = output_format(output, None)
    if fmt not in ("jsonl", "json"):
        raise click.UsageError(f"wde classify-tokens writes .jsonl or .json, not .{fmt}")
    if logits and aggregation != "tokens":
        raise click.UsageError("--logits needs --aggregation tokens")
    if aggregation == "tokens" and (ignore_labels or stride is not None):
        raise click.UsageError(f"{'--ignore-label' if ignore_labels else '--stride'} needs an --aggregation other "
                               "than tokens" + ("" if ignore_labels else " and none"))
    if model is None and not os.environ.get("WDE_DEFAULT_MODEL"):
        raise click.ClickException(NO_MODEL)
    read = read_inputs(texts, input_file, input_format=input_format, column=column, encoding=encoding)
    options = {"aggregation": None if aggregation == "tokens" else aggregation, "stride": stride,
               "ignore_labels": list(ignore_labels) or None, "truncate": True if truncate is None and stride is None
               else truncate}
    args = {"device": device, "dtype": dtype, "num_threads": num_threads, **parse_engine_args(engine_args)}
    with engine_error(), Engine(model, **args) as engine:
        try:
            results = engine.classify_tokens(read.items, **options)
        except (ValueError, TypeError) as exc:  # "input 4: ..." -> "in.jsonl line 5: ..."
            raise renamed(exc, read.labels) from None
    if aggregation == "tokens":
        fields = TOKEN_FIELDS + (("logits",) if logits else ())
        columns = {name: [record[name] for record in results] for name in fields}
    else:
        columns = {"entities": results}
    write_outputs(columns, read.ids, output, fmt, tuple(columns))
