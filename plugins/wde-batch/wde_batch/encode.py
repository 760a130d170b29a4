"""``wde encode``: embed texts (and, with an image model, images) from arguments, a file or stdin into ``.npy``,
``.jsonl``, ``.json``, ``.parquet``."""

from __future__ import annotations

from pathlib import Path

import click

from wde_batch.images import refuse_image_files_as_texts, renamed
from wde_batch.io import OUTPUT_FORMATS, input_options, output_format, read_inputs, write_outputs
from wde_core.plugin_api import engine_arg_option, engine_error, parse_engine_args

PROGRESS_THRESHOLD = 256


@click.command("encode")
@click.argument("texts", nargs=-1)
@click.option("-m", "--model", default=None, help="Model directory or hub id (default: the plugins' default).")
@click.option("--image", "images", multiple=True, type=click.Path(path_type=Path),
              help="An image file to embed (repeatable; an image model such as CLIP); after the TEXTS, in order.")
@input_options
@click.option("--image-column", default="image", show_default=True,
              help="The field or column of --input holding an image (a path relative to the file, a data: URL, "
                   "Parquet bytes) in records that have no text.")
@click.option("-o", "--output", default=None, help="Write to FILE (.npy, .jsonl, .json or .parquet); JSON lines on "
              "stdout when omitted.")
@click.option("--output-format", "output_format_name", type=click.Choice(sorted(set(OUTPUT_FORMATS.values()))),
              default=None, help="Format of --output when not its suffix.")
@click.option("--normalize/--no-normalize", default=None, help="Override the model's normalization.")
@click.option("--dimensions", type=int, default=None, help="Matryoshka: keep the first N dimensions.")
@click.option("--output-type", "output_types", multiple=True, default=("dense",), show_default=True,
              help="dense, sparse or colbert (bge-m3); repeat for several (JSON lines output).")
@click.option("--prompt", default=None, help="Text prepended to every input.")
@click.option("--prompt-name", default=None, help="A prompt from config_sentence_transformers.json.")
@click.option("--truncate/--no-truncate", default=True, show_default=True,
              help="Truncate inputs to the model's max length, or fail on longer ones.")
@click.option("--device", default="auto", show_default=True)
@click.option("--dtype", default="auto", show_default=True)
@click.option("--attention-backend", default=None)
@click.option("--pooling", type=click.Choice(["cls", "mean", "last", "max"]), default=None,
              help="Override the model's pooling.")
@click.option("--max-model-len", type=int, default=None, help="Override the model's max tokens per input.")
@click.option("--max-num-batched-tokens", type=int, default=None)
@click.option("--num-threads", type=int, default=None, help="CPU threads for inference.")
@click.option("--executor", default=None, help="sync, pipelined, data_parallel or a plugin's executor.")
@engine_arg_option
@click.option("-q", "--quiet", is_flag=True, help="No progress bar.")
def encode(texts, model, images, input_file, input_format, column, encoding, image_column, output, output_format_name,
           normalize, dimensions, output_types, prompt, prompt_name, truncate, quiet, engine_args, **named) -> None:
    """Embed TEXTS and --image files (or --input FILE, or stdin lines) and write the embeddings."""
    from wde_core.plugin_api import Engine

    fmt = output_format(output, output_format_name, output_types)
    refuse_image_files_as_texts(texts)
    read = read_inputs(texts, input_file, input_format=input_format, column=column, encoding=encoding,
                       images=images, image_column=image_column)
    with engine_error(), Engine(model, **{**named, **parse_engine_args(engine_args)}) as engine:
        try:
            embeddings = engine.encode(read.items, normalize=normalize, dimensions=dimensions, prompt=prompt,
                                       prompt_name=prompt_name, truncate=truncate,
                                       output=output_types[0] if output_types == ("dense",) else output_types,
                                       show_progress=not quiet and len(read.items) >= PROGRESS_THRESHOLD)
        except (ValueError, TypeError) as exc:  # "input 4: ..." -> "in.jsonl line 5: ..."
            raise renamed(exc, read.labels) from None
    write_outputs(embeddings, read.ids, output, fmt, output_types)
