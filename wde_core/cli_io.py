"""Reading texts for ``wde encode``/``wde rerank`` and writing their results, in the format a file's suffix
names: ``.txt``, ``.jsonl``, ``.json``, ``.csv``, ``.tsv``, ``.parquet`` in; ``.npy``, ``.jsonl``, ``.json``,
``.parquet`` out. Every bad input is one line naming the file (or stdin), exit status 1."""

from __future__ import annotations

import csv
import io
import json
import sys
from pathlib import Path
from typing import Any

import click
import numpy as np

INPUT_FORMATS = {".txt": "txt", ".jsonl": "jsonl", ".json": "json", ".csv": "csv", ".tsv": "tsv",
                 ".parquet": "parquet"}
OUTPUT_FORMATS = {".npy": "npy", ".jsonl": "jsonl", ".json": "json", ".parquet": "parquet"}
Texts = tuple[list[str], "list[Any] | None"]


def input_options(command):
    """The input options shared by the commands that read texts: -i, --input-format, --column, --encoding."""
    for option in reversed([
        click.option("-i", "--input", "input_file", default=None,
                     help="Read texts from FILE ('-': stdin); its suffix names the format (see --input-format)."),
        click.option("--input-format", type=click.Choice(sorted(set(INPUT_FORMATS.values()))), default=None,
                     help="Format of --input or stdin when not its suffix (stdin: txt, one text per line)."),
        click.option("--column", default="text", show_default=True,
                     help="The field (.jsonl, .json) or column (.csv, .tsv, .parquet) holding the text."),
        click.option("--encoding", default="utf-8", show_default=True, help="Text encoding of the input."),
    ]):
        command = option(command)
    return command


def read_inputs(texts: tuple[str, ...], input_file: str | None, *, input_format: str | None = None,
                column: str = "text", encoding: str = "utf-8") -> Texts:
    """Return the texts (arguments, ``input_file`` or stdin) and their ids (an ``id`` field or column), if any."""
    if texts and input_file:
        raise click.UsageError("give texts as arguments or --input, not both")
    if texts:
        return list(texts), None
    stdin = input_file in (None, "-")
    name = "stdin" if stdin else input_file
    fmt = input_format or ("txt" if stdin else _input_format(input_file))
    if stdin:
        data = sys.stdin.buffer.read()
    elif not Path(input_file).is_file():
        raise click.ClickException(f"{name}: no such file")
    else:
        data = Path(input_file).read_bytes()
    items, ids = READERS[fmt](name, data, column, encoding)
    if not items:
        raise click.ClickException(f"{name}: no texts (empty or only blank lines)")
    return items, ids if ids and any(i is not None for i in ids) else None


def _input_format(path: str) -> str:
    suffix = Path(path).suffix.lower()
    if suffix not in INPUT_FORMATS:
        what = f"suffix {suffix!r}" if suffix else "no suffix"
        raise click.ClickException(f"{path}: unknown input format ({what}); known: {', '.join(INPUT_FORMATS)}; "
                                   "or name one with --input-format")
    return INPUT_FORMATS[suffix]


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


def _read_txt(name: str, data: bytes, column: str, encoding: str) -> Texts:
    lines = (line.rstrip("\r") for line in decode(name, data, encoding).split("\n"))
    return [line for line in lines if line.strip()], None


def _record_text(name: str, where: str, record: Any, column: str) -> tuple[str, Any]:
    if isinstance(record, str):
        return record, None
    if not isinstance(record, dict) or not isinstance(record.get(column), str):
        raise click.ClickException(f"{name} {where}: field {column!r} must be a string")
    return record[column], record.get("id")


def _read_jsonl(name: str, data: bytes, column: str, encoding: str) -> Texts:
    texts, ids = [], []
    for number, line in enumerate(decode(name, data, encoding).split("\n"), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise click.ClickException(f"{name} line {number}: not JSON ({exc})") from None
        text, id_ = _record_text(name, f"line {number}", record, column)
        texts.append(text)
        ids.append(id_)
    return texts, ids


def _read_json(name: str, data: bytes, column: str, encoding: str) -> Texts:
    try:
        records = json.loads(decode(name, data, encoding) or "[]")
    except json.JSONDecodeError as exc:
        raise click.ClickException(f"{name}: not JSON ({exc})") from None
    if not isinstance(records, list):
        raise click.ClickException(f"{name}: expected a JSON array of strings or of objects with {column!r}")
    pairs = [_record_text(name, f"item {i}", record, column) for i, record in enumerate(records)]
    return [text for text, _ in pairs], [id_ for _, id_ in pairs]


def _read_table(name: str, rows: list[dict[str, Any]], columns: list[str], column: str) -> Texts:
    if column not in columns:
        raise click.ClickException(f"{name}: no column {column!r} (columns: {', '.join(map(str, columns))}); "
                                   "name one with --column")
    texts = [row[column] for row in rows]
    bad = next((i for i, text in enumerate(texts) if not isinstance(text, str)), None)
    if bad is not None:
        raise click.ClickException(f"{name} row {bad + 1}: column {column!r} must be text, not {texts[bad]!r}")
    return texts, [row.get("id") for row in rows] if "id" in columns else None


def _read_csv(name: str, data: bytes, column: str, encoding: str, delimiter: str = ",") -> Texts:
    reader = csv.DictReader(io.StringIO(decode(name, data, encoding), newline=""), delimiter=delimiter)
    try:
        rows = list(reader)
    except csv.Error as exc:
        raise click.ClickException(f"{name} line {reader.line_num}: {exc}") from None
    return _read_table(name, rows, reader.fieldnames or [], column)


def _read_parquet(name: str, data: bytes, column: str, encoding: str) -> Texts:
    pq = _pyarrow_parquet(name)
    try:
        table = pq.read_table(io.BytesIO(data))
    except Exception as exc:  # noqa: BLE001 - pyarrow raises several types for a damaged file
        raise click.ClickException(f"{name}: not a Parquet file ({exc})") from None
    return _read_table(name, table.to_pylist(), table.column_names, column)


def _pyarrow_parquet(name: str):
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise click.ClickException(f"{name}: Parquet needs pyarrow: pip install pyarrow") from None
    return pq


READERS = {"txt": _read_txt, "jsonl": _read_jsonl, "json": _read_json, "csv": _read_csv,
           "tsv": lambda *args: _read_csv(*args, delimiter="\t"), "parquet": _read_parquet}


def output_format(output: str | None, fmt: str | None, output_types: tuple[str, ...] = ("dense",)) -> str:
    """The output format: ``fmt`` if given, else the suffix of ``output`` (JSON lines on stdout); checked
    against the output types before any model runs."""
    if fmt is None and output not in (None, "-"):
        suffix = Path(output).suffix.lower()
        fmt = OUTPUT_FORMATS.get(suffix)
        if fmt is None:
            what = f"suffix {suffix!r}" if suffix else "no suffix"
            raise click.UsageError(f"{output}: unknown output format ({what}); known: {', '.join(OUTPUT_FORMATS)}; "
                                   "or name one with --output-format")
    fmt = fmt or "jsonl"
    if fmt in ("npy", "parquet") and output in (None, "-"):
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

        _pyarrow_parquet(output).write_table(pa.Table.from_pylist(records), output)
        return
    text = (json.dumps(records, ensure_ascii=False) + "\n" if fmt == "json"
            else "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))
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
