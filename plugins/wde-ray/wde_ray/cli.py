"""``wde embed-dataset``: embed the rows of JSON lines or Parquet files on Ray, writing Parquet; ``wde serve-ray``:
``wde serve``'s app from Ray Serve replicas."""

from __future__ import annotations

import time

import click

from wde_core.plugin_api import parse_engine_args
from wde_server.public import ServerOptions, check_names, server_options


@click.command("embed-dataset")
@click.argument("input_path", metavar="INPUT")
@click.argument("output_path", metavar="OUTPUT")
@click.option("--model", "-m", default=None, help="Model directory or hub id (default: the default model).")
@click.option("--column", default="text", show_default=True, help="The column holding the texts.")
@click.option("--image-column", default=None,
              help="Embed this column's images instead of the texts (an image model): Parquet binary bytes, file "
                   "paths (relative to INPUT's folder) or data:image/...;base64, URLs.")
@click.option("--output-column", default="embedding", show_default=True, help="The column the vectors go to.")
@click.option("--id-column", default="id", show_default=True, help="The column naming rows in errors.")
@click.option("--workers", default=1, show_default=True, type=click.IntRange(min=1),
              help="Actors, each with its own engine.")
@click.option("--num-cpus", default=1.0, show_default=True, type=float,
              help="CPUs Ray reserves per actor (its engine's threads: the integer part, at least 1).")
@click.option("--num-gpus", default=0.0, show_default=True, type=float, help="GPUs per actor.")
@click.option("--batch-size", default=256, show_default=True, type=click.IntRange(min=1),
              help="Rows per actor call (the engine batches them by tokens).")
@click.option("--address", default=None, envvar="RAY_ADDRESS",
              help="Ray cluster to join (env RAY_ADDRESS); without it a local Ray runs for this command.")
@click.option("--on-error", default="raise", show_default=True, type=click.Choice(["raise", "null"]),
              help="A bad row stops the run naming it (raise), or gets a null vector and an 'error' (null).")
@click.option("--allow-empty", is_flag=True, help="Embed empty texts instead of refusing them.")
@click.option("--dimensions", default=None, type=click.IntRange(min=1), help="Matryoshka truncation.")
@click.option("--prompt-name", default=None, help="A prompt of the model's, put before every text.")
@click.option("--output", "outputs", multiple=True, metavar="NAME",
              help="An output of the model's (dense, sparse for SPLADE and bge-m3, colbert); repeat for several, each "
                   "then in a column OUTPUT_COLUMN_NAME. Default: dense.")
@click.option("--engine-arg", "engine_args", multiple=True, metavar="KEY=VALUE",
              help="An engine argument (as in wde inspect); VALUE is read as JSON, else as text.")
def embed_dataset(input_path, output_path, model, column, image_column, output_column, id_column, workers, num_cpus,
                  num_gpus, batch_size, address, on_error, allow_empty, dimensions, prompt_name, outputs,
                  engine_args) -> None:
    """Embed the COLUMN (or --image-column) of every row of INPUT (a .jsonl or .parquet file, or a folder of them)
    on Ray and write the rows, every input column kept and the vectors added, as Parquet files into OUTPUT."""
    from wde_ray.batch import embed
    from wde_ray.files import find_cause, image_root, read_dataset, start_ray
    from wde_ray.rows import RowError

    args = parse_engine_args(engine_args)
    start = time.perf_counter()
    started = start_ray(address, workers * num_cpus)
    try:
        source, wanted = read_dataset(input_path), image_column or column
        if wanted not in source.schema().names:
            raise ValueError(f"{input_path}: no column {wanted!r} (columns: {', '.join(source.schema().names)})")
        ds = embed(source, model, column=column, output_column=output_column, image_column=image_column,
                   image_root=image_root(input_path) if image_column else None,
                   id_column=id_column, on_error=on_error, allow_empty=allow_empty, batch_size=batch_size,
                   workers=workers, num_cpus=num_cpus, num_gpus=num_gpus, dimensions=dimensions,
                   prompt_name=prompt_name, output=outputs[0] if len(outputs) == 1 else (outputs or "dense"), **args)
        ds.write_parquet(output_path)
    except Exception as exc:  # Ray wraps a failed row in its own task errors
        cause = find_cause(exc, RowError) or exc
        if not isinstance(cause, (ValueError, TypeError, OSError)):
            raise
        raise click.ClickException(str(cause).split("\n")[0]) from None
    finally:
        if started:
            import ray

            ray.shutdown()
    click.echo(f"wrote {output_path} in {time.perf_counter() - start:.1f} s", err=True)


@click.command("serve-ray")
@server_options
@click.option("--replicas", default=1, show_default=True, type=click.IntRange(min=1),
              help="Ray Serve replicas, each with its own engines.")
@click.option("--address", default=None, help="The Ray cluster to join (default: RAY_ADDRESS, else a local Ray).")
def serve_ray(models, host, port, names, engine_args, replicas, address, **limits) -> None:
    """Serve MODELS as `wde serve` does (same routes, options and limits, per replica) from --replicas Ray Serve
    replicas behind Serve's proxy on --host/--port; SIGTERM/SIGINT delete the application."""
    from dataclasses import asdict

    check_names(models, names)
    try:
        from wde_ray import serve as ray_serve
    except ImportError as exc:
        raise click.ClickException(f"wde serve-ray needs Ray Serve: pip install 'ray[serve]' ({exc})") from None
    try:
        app = ray_serve.serve_app(list(models) or [None], num_replicas=replicas, served_model_names=names,
                                  **asdict(ServerOptions(**limits)), **parse_engine_args(engine_args))
        ray_serve.run(app, host=host, port=port, address=address)
    except (LookupError, ValueError, TypeError, OSError) as exc:
        raise click.ClickException(str(exc)) from None
