"""Reading texts for ``wde encode``/``wde rerank`` and writing their results, in the format a file's suffix
names: ``.txt``, ``.jsonl``, ``.json``, ``.csv``, ``.tsv``, ``.parquet`` in; ``.npy``, ``.jsonl``, ``.json``,
``.parquet`` out. Every bad input is one line naming the file (or stdin), exit status 1."""

from __future__ import annotations

import csv
import io
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import numpy as np

from wde_batch.images import given, pick

INPUT_FORMATS = {".txt": "txt", ".jsonl": "jsonl", ".json": "json", ".csv": "csv", ".tsv": "tsv",
                 ".parquet": "parquet"}
OUTPUT_FORMATS = {".npy": "npy", ".jsonl": "jsonl", ".json": "json", ".parquet": "parquet"}


def input_options(command):
    """The input options shared by the commands that read texts: -i, --input-format, --column, --encoding."""
    options = [
        click.option("-i", "--input", "input_file", default=None,
                     help="Read texts from FILE ('-': stdin); its suffix names the format (see --input-format)."),
        click.option("--input-format", type=click.Choice(sorted(set(INPUT_FORMATS.values()))), default=None,
                     help="Format of --input or stdin when not its suffix (stdin: txt, one text per line)."),
        click.option("--column", default="text", show_default=True,
                     help="The field (.jsonl, .json) or column (.csv, .tsv, .parquet) holding the text."),
        click.option("--encoding", default="utf-8", show_default=True, help="Text encoding of the input.")]
    for option in reversed(options):
        command = option(command)
    return command


@dataclass
class Inputs:
    """What a command read: the engine's inputs (texts, and for ``wde encode`` image inputs), their ids (``None``
    when the input has none) and where each came from (``in.jsonl line 4``; ``None`` for a text argument)."""

    items: list[Any]
    ids: list[Any] | None
    labels: list[str | None]


@dataclass(frozen=True)
class Source:
    """A file being read: its name in errors, the text field or column, the image one (``None``: texts only),
    and the folder relative image paths start from."""

    name: str
    column: str = "text"
    image_column: str | None = None
    base: Path = Path(".")


def read_inputs(texts: tuple[str, ...], input_file: str | None, *, input_format: str | None = None,
                column: str = "text", encoding: str = "utf-8", images: tuple[Path, ...] = (),
                image_column: str | None = None) -> Inputs:
    """The inputs given as ``texts`` then ``images`` (arguments, in that order), or read from ``input_file``
    (or stdin), with their ids (an ``id`` field or column); records may hold an ``image_column`` instead."""
    if (texts or images) and input_file:
        raise click.UsageError("give texts (or --image) as arguments or --input, not both")
    missing = next((p for p in images if not p.is_file()), None)
    if missing is not None:
        raise click.ClickException(f"--image {missing}: no such file")
    if texts or images:
        return Inputs([*texts, *images], None, [None] * len(texts) + [f"--image {p}" for p in images])
    stdin = input_file in (None, "-")
    name = "stdin" if stdin else input_file
    fmt = input_format or ("txt" if stdin else format_of(input_file, INPUT_FORMATS, "input", click.ClickException))
    if not stdin and not Path(input_file).is_file():
        raise click.ClickException(f"{name}: no such file")
    data = sys.stdin.buffer.read() if stdin else Path(input_file).read_bytes()
    source = Source(name, column, image_column, Path(".") if stdin else Path(input_file).parent)
    if fmt == "parquet":
        items, ids, labels = _table(source, _parquet(name, data))
    else:
        items, ids, labels = READERS[fmt](source, decode(name, data, encoding))
    if not items:
        raise click.ClickException(f"{name}: no texts (empty or only blank lines)")
    return Inputs(items, ids if ids and any(i is not None for i in ids) else None, labels)


def format_of(path: str, formats: dict[str, str], what: str, error: type[click.ClickException]) -> str:
    """The format that ``path``'s suffix names, or an error listing the known suffixes."""
    suffix = Path(path).suffix.lower()
    if suffix not in formats:
        raise error(f"{path}: unknown {what} format ({f'suffix {suffix!r}' if suffix else 'no suffix'}); known: "
                    f"{', '.join(formats)}; or name one with --{what}-format")
    return formats[suffix]


def decode(name: str, data: bytes, encoding: str) -> str:
    """``data`` as text, or one line naming the file, line and byte offset where it is not ``encoding``."""
    try:
        return data.decode("utf-8-sig" if encoding.lower().replace("_", "-") in ("utf-8", "utf8") else encoding)
    except LookupError:
        raise click.BadParameter(f"unknown encoding {encoding!r}", param_hint="--encoding") from None
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise click.ClickException(f"{name}: not valid {encoding} at line {line}, byte offset {exc.start} "
                                   f"({exc.reason}); name the file's encoding with --encoding") from None


def _txt(source: Source, text: str) -> tuple[list[str], None, list[str]]:
    lines = [(number, line.rstrip("\r")) for number, line in enumerate(text.split("\n"), start=1)]
    kept = [(number, line) for number, line in lines if line.strip()]
    return [line for _, line in kept], None, [f"{source.name} line {number}" for number, _ in kept]


def _records(source: Source, records: list[tuple[str, Any]]) -> tuple[list[Any], list[Any], list[str]]:
    """Inputs, ids and labels of ``(where, record)`` pairs, each a string or an object with ``column`` (or
    ``image_column``) and an optional ``id``."""
    items, ids = [], []
    for where, record in records:
        items.append(_record_item(source, f"{source.name} {where}", record))
        ids.append(record.get("id") if isinstance(record, dict) else None)
    return items, ids, [f"{source.name} {where}" for where, _ in records]


def _record_item(source: Source, where: str, record: Any) -> Any:
    """The input of one record: its text, or its image when ``image_column`` holds one."""
    if isinstance(record, str):
        return record
    if isinstance(record, dict):
        image = record.get(source.image_column) if source.image_column else None
        item = pick(where, record.get(source.column), image, (source.column, source.image_column), source.base)
        if item is not None:
            return item
        if isinstance(record.get(source.column), str):
            return record[source.column]
    raise click.ClickException(f"{where}: field {source.column!r} must be a string")


def _jsonl(source: Source, text: str) -> tuple[list[Any], list[Any], list[str]]:
    records = []
    for number, line in enumerate(text.split("\n"), start=1):
        if line.strip():
            records.append((f"line {number}", _json(f"{source.name} line {number}", line)))
    return _records(source, records)


def _json(name: str, text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise click.ClickException(f"{name}: not JSON ({exc})") from None


def _json_array(source: Source, text: str) -> tuple[list[Any], list[Any], list[str]]:
    records = _json(source.name, text or "[]")
    if not isinstance(records, list):
        raise click.ClickException(f"{source.name}: expected a JSON array of strings or of objects with "
                                   f"{source.column!r}")
    return _records(source, [(f"item {i}", record) for i, record in enumerate(records)])


def _csv(source: Source, text: str, delimiter: str = ",") -> tuple[list[Any], list[Any] | None, list[str]]:
    reader = csv.DictReader(io.StringIO(text, newline=""), delimiter=delimiter)
    try:
        return _table(source, (list(reader), reader.fieldnames or []))
    except csv.Error as exc:
        raise click.ClickException(f"{source.name} line {reader.line_num}: {exc}") from None


def _table(source: Source, table: tuple[list[dict[str, Any]], list[str]]) -> tuple[list, list | None, list[str]]:
    rows, columns = table
    name, column, image_column = source.name, source.column, source.image_column
    with_images = image_column is not None and image_column in columns
    if column not in columns and not with_images:
        raise click.ClickException(f"{name}: no column {column!r} (columns: {', '.join(map(str, columns))}); "
                                   "name one with --column")
    labels = [f"{name} row {i + 1}" for i in range(len(rows))]
    items = [_row_item(source, where, row, with_images) for where, row in zip(labels, rows)]
    return items, [row.get("id") for row in rows] if "id" in columns else None, labels


def _row_item(source: Source, where: str, row: dict[str, Any], with_images: bool) -> Any:
    """The input of one table row: its text, or its image when the image column holds one."""
    text, fields = row.get(source.column), (source.column, source.image_column)
    image = pick(where, text, row[source.image_column], fields, source.base) if with_images else None
    if image is not None:
        return image
    if with_images and not given(text):
        raise click.ClickException(f"{where}: no value in column {source.column!r} or {source.image_column!r}; "
                                   "give one of them")
    if not isinstance(text, str):
        raise click.ClickException(f"{where}: column {source.column!r} must be text, not {text!r}")
    return text


def _parquet(name: str, data: bytes) -> tuple[list[dict[str, Any]], list[str]]:
    try:
        table = _pyarrow_parquet(name).read_table(io.BytesIO(data))
    except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid is a ValueError
        raise click.ClickException(f"{name}: not a Parquet file ({exc})") from None
    return table.to_pylist(), table.column_names


def _pyarrow_parquet(name: str):
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise click.ClickException(f"{name}: Parquet needs pyarrow: pip install pyarrow") from None
    return pq


READERS = {"txt": _txt, "jsonl": _jsonl, "json": _json_array, "csv": _csv,
           "tsv": lambda source, text: _csv(source, text, "\t")}


def output_format(output: str | None, fmt: str | None, output_types: tuple[str, ...] = ("dense",)) -> str:
    """The output format: ``fmt`` if given, else the suffix of ``output`` (JSON lines on stdout); checked
    against the output types before any model runs."""
    to_stdout = output in (None, "-")
    fmt = fmt or ("jsonl" if to_stdout else format_of(output, OUTPUT_FORMATS, "output", click.UsageError))
    if fmt in ("npy", "parquet") and to_stdout:
        raise click.UsageError(f"--output-format {fmt} needs --output FILE")
    others = [t for t in output_types if t != "dense"]
    if (fmt == "npy" and others) or (fmt == "parquet" and "sparse" in others):
        raise click.UsageError(f"--output-type {' '.join(output_types)} needs a .jsonl output (or .json), not .{fmt}")
    return fmt


def write_outputs(results: Any, ids: list[Any] | None, output: str | None, fmt: str = "jsonl",
                  output_types: tuple[str, ...] = ("dense",)) -> None:
    """Write ``results`` as ``fmt``: one record per input, its ``id`` first when the input had ids, then
    ``embedding`` (dense alone) or one key per output type (sparse as ``{token_id: weight}``)."""
    if fmt == "npy":
        np.save(output, results)
        if ids is not None:
            beside = Path(output).with_suffix(".ids.json")
            beside.write_text(json.dumps(ids, ensure_ascii=False), encoding="utf-8")
            click.echo(f"{output}: ids written beside it to {beside} (.npy holds the vectors only)", err=True)
        return
    columns = {"embedding": results} if output_types == ("dense",) else results
    records = [{**({} if ids is None else {"id": ids[i]}),
                **{name: _jsonable(values[i]) for name, values in columns.items()}}
               for i in range(len(next(iter(columns.values()))))]
    if fmt == "parquet":
        import pyarrow as pa

        return _pyarrow_parquet(output).write_table(pa.Table.from_pylist(records), output)
    text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records) if fmt == "jsonl" else (
        json.dumps(records, ensure_ascii=False) + "\n")
    if output in (None, "-"):
        click.echo(text, nl=False)
    else:
        Path(output).write_text(text, encoding="utf-8")


def _jsonable(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, dict):
        return {str(k): float(v) for k, v in value.items()}
    return value
