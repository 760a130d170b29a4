"""``wde encode``: embed texts from arguments, a file or stdin into ``.npy`` or ``.jsonl``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click
import numpy as np

PROGRESS_THRESHOLD = 256


def read_inputs(texts: tuple[str, ...], input_file: str | None) -> tuple[list[str], list[Any] | None]:
    """Return the texts and, for ``.jsonl`` input with ``id`` fields, their ids."""
    if texts and input_file:
        raise click.UsageError("give texts as arguments or --input, not both")
    if texts:
        return list(texts), None
    if input_file not in (None, "-") and not Path(input_file).is_file():
        raise click.BadParameter(f"{input_file}: no such file", param_hint="--input")
    if input_file and input_file.endswith(".jsonl"):
        return _read_jsonl(Path(input_file))
    with click.open_file(input_file or "-", encoding="utf-8") as f:  # "-": stdin, left open
        return [line.rstrip("\n") for line in f if line.strip()], None


def _read_jsonl(path: Path) -> tuple[list[str], list[Any] | None]:
    texts, ids = [], []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise click.BadParameter(f"{path} line {number}: not JSON ({exc})", param_hint="--input") from None
            if not isinstance(record, dict) or not isinstance(record.get("text"), str):
                raise click.BadParameter(f"{path} line {number}: field 'text' must be a string",
                                         param_hint="--input")
            texts.append(record["text"])
            ids.append(record.get("id"))
    return texts, ids if any(i is not None for i in ids) else None


def write_outputs(results: Any, ids: list[Any] | None, output: str | None,
                  output_types: tuple[str, ...] = ("dense",)) -> None:
    """Write ``.npy`` (dense only) or ``.jsonl``: ``{"embedding": [...]}`` per input for dense alone,
    else one key per output type (sparse as ``{token_id: weight}``, ColBERT as a list of vectors)."""
    if output is not None and output.endswith(".npy"):  # encode() refused .npy for other output types
        np.save(output, results)
        return
    columns = {"embedding": results} if output_types == ("dense",) else results
    lines = []
    for i in range(len(next(iter(columns.values())))):
        record: dict[str, Any] = {} if ids is None else {"id": ids[i]}
        record.update({name: _jsonable(values[i]) for name, values in columns.items()})
        lines.append(json.dumps(record, ensure_ascii=False))
    text = "\n".join(lines) + "\n"
    if output is None or output == "-":
        click.echo(text, nl=False)
    else:
        Path(output).write_text(text, encoding="utf-8")


def _jsonable(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, dict):
        return {str(k): float(v) for k, v in value.items()}
    return value


@click.command("encode")
@click.argument("texts", nargs=-1)
@click.option("-m", "--model", default=None, help="Model directory or hub id (default: the plugins' default).")
@click.option("-i", "--input", "input_file", default=None, help=".txt (one text per line) or .jsonl ('text', 'id').")
@click.option("-o", "--output", default=None, help=".npy or .jsonl; JSON lines on stdout when omitted.")
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
@click.option("-q", "--quiet", is_flag=True, help="No progress bar.")
def encode(texts, model, input_file, output, normalize, dimensions, output_types, prompt, prompt_name, truncate,
           quiet, **engine_args) -> None:
    """Embed TEXTS (or --input FILE, or stdin lines) and write the embeddings."""
    from wde_core.engine import Engine

    items, ids = read_inputs(texts, input_file)
    if output is not None and output.endswith(".npy") and output_types != ("dense",):
        raise click.UsageError(f"--output-type {' '.join(output_types)} needs a .jsonl output, not .npy")
    try:
        with Engine(model, **engine_args) as engine:
            embeddings = engine.encode(items, normalize=normalize, dimensions=dimensions, prompt=prompt,
                                       prompt_name=prompt_name, truncate=truncate,
                                       output=output_types[0] if output_types == ("dense",) else output_types,
                                       show_progress=not quiet and len(items) >= PROGRESS_THRESHOLD)
    except (LookupError, ValueError, TypeError, OSError) as exc:
        raise click.ClickException(str(exc)) from None
    write_outputs(embeddings, ids, output, output_types)
