"""``wde encode``/``wde rerank`` inputs and outputs (issue 15): every input format by suffix or
``--input-format``, ``--encoding``, one-line errors naming the file (or stdin), line and byte offset, and
output formats by suffix or ``--output-format``, ids beside ``.npy``."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from wde_core import Engine
from wde_core.cli.main import cli

TEXTS = ["café au lait", "Embeddings map text to vectors", "short"]
IDS = ["a", "b", "c"]


@pytest.fixture
def wde(isolated_host):
    """Run ``wde ARGS...`` in process on a fresh host; stdin as bytes or text."""
    isolated_host.register_commands(cli)
    return lambda *args, stdin=None: CliRunner().invoke(cli, [str(a) for a in args], input=stdin)


@pytest.fixture(scope="module")
def expected(tiny_st_bert_dir) -> np.ndarray:
    return Engine(str(tiny_st_bert_dir), device="cpu").encode(TEXTS)


def encode(wde, model, *args, stdin=None):
    result = wde("encode", "-m", model, "--device", "cpu", *args, stdin=stdin)
    assert result.exit_code == 0, (result.output, result.exception)
    return result


def vectors(jsonl: str) -> tuple[np.ndarray, list]:
    records = [json.loads(line) for line in jsonl.splitlines()]
    return np.array([r["embedding"] for r in records]), [r.get("id") for r in records]


def one_line_error(result, exit_code: int = 1) -> str:
    """Assert a handled failure with a one-line message (no traceback) and return that line."""
    assert result.exit_code == exit_code, result.output
    assert isinstance(result.exception, SystemExit) and "Traceback" not in result.output
    return result.stderr.strip().splitlines()[-1]


# --- encodings ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("suffix, offset", [(".txt", 40), (".jsonl", 74)])
def test_a_non_utf8_file_is_one_line_naming_file_line_and_byte(wde, tmp_path, tiny_st_bert_dir, suffix, offset):
    lines = TEXTS if suffix == ".txt" else [json.dumps({"text": t}, ensure_ascii=False) for t in TEXTS]
    path = tmp_path / f"latin1{suffix}"
    path.write_bytes("\n".join(reversed(lines)).encode("latin-1"))  # "café" on line 3, é at byte `offset`
    err = one_line_error(wde("encode", "-m", tiny_st_bert_dir, "-i", path))
    assert err == (f"Error: {path}: not valid utf-8 at line 3, byte offset {offset} (invalid continuation byte); "
                   "name the file's encoding with --encoding")


def test_non_utf8_stdin_is_named_and_encoding_reads_it(wde, tiny_st_bert_dir, expected):
    data = "\n".join(TEXTS).encode("latin-1")
    err = one_line_error(wde("encode", "-m", tiny_st_bert_dir, stdin=data))
    assert err.startswith("Error: stdin: not valid utf-8 at line 1, byte offset 3 (")
    out = encode(wde, tiny_st_bert_dir, "--encoding", "latin-1", stdin=data).stdout
    np.testing.assert_allclose(vectors(out)[0], expected, atol=1e-6)
    assert "unknown encoding 'klingon'" in one_line_error(
        wde("encode", "-m", tiny_st_bert_dir, "--encoding", "klingon", stdin=data), exit_code=2)


def test_the_installed_script_reports_a_bad_encoding_without_traceback(tmp_path):
    path = tmp_path / "in.txt"
    path.write_bytes(b"ok\ncaf\xe9\n")
    proc = subprocess.run([str(Path(sys.executable).with_name("wde")), "encode", "-i", str(path)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.strip().splitlines()[-1] == (f"Error: {path}: not valid utf-8 at line 2, byte offset 6 "
                                                    "(invalid continuation byte); name the file's encoding with "
                                                    "--encoding")


# --- input formats -----------------------------------------------------------------------------------
def write_csv(path: Path, delimiter: str, column: str = "body") -> Path:
    with open(path, "w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f, delimiter=delimiter)
        writer.writerow(["id", column, "other"])
        writer.writerows([i, t, "x"] for i, t in zip(IDS, TEXTS))
    return path


@pytest.mark.parametrize("kind", ["json-strings", "json-objects", "csv", "tsv", "parquet"])
def test_each_input_format_follows_the_suffix(wde, tmp_path, tiny_st_bert_dir, expected, kind):
    column, with_ids = ["--column", "body"], kind != "json-strings"
    if kind == "json-strings":
        path, column = tmp_path / "in.json", []
        path.write_text(json.dumps(TEXTS), encoding="utf-8")
    elif kind == "json-objects":
        path = tmp_path / "in.json"
        path.write_text(json.dumps([{"id": i, "body": t} for i, t in zip(IDS, TEXTS)]), encoding="utf-8")
    elif kind == "parquet":
        pa, pq = pytest.importorskip("pyarrow"), pytest.importorskip("pyarrow.parquet")
        path = tmp_path / "in.parquet"
        pq.write_table(pa.table({"id": IDS, "body": TEXTS}), path)
    else:
        path = write_csv(tmp_path / f"in.{kind}", "," if kind == "csv" else "\t")
    got, ids = vectors(encode(wde, tiny_st_bert_dir, "-i", path, *column).stdout)
    np.testing.assert_allclose(got, expected, atol=1e-6)
    assert ids == (IDS if with_ids else [None] * 3)


def test_a_missing_column_names_the_file_and_the_columns(wde, tmp_path, tiny_st_bert_dir):
    path = write_csv(tmp_path / "in.csv", ",")
    assert one_line_error(wde("encode", "-m", tiny_st_bert_dir, "-i", path)) == (
        f"Error: {path}: no column 'text' (columns: id, body, other); name one with --column")
    bad = tmp_path / "in.json"
    bad.write_text(json.dumps({"text": "not in an array"}))
    assert one_line_error(wde("encode", "-m", tiny_st_bert_dir, "-i", bad)) == (
        f"Error: {bad}: expected a JSON array of strings or of objects with 'text'")


def test_input_format_overrides_the_suffix_and_unknown_suffixes_are_refused(wde, tmp_path, tiny_st_bert_dir,
                                                                             expected):
    path = tmp_path / "records.dat"
    path.write_text("\n".join(json.dumps({"text": t}) for t in TEXTS), encoding="utf-8")
    assert one_line_error(wde("encode", "-m", tiny_st_bert_dir, "-i", path)) == (
        f"Error: {path}: unknown input format (suffix '.dat'); known: .txt, .jsonl, .json, .csv, .tsv, .parquet; "
        "or name one with --input-format")
    np.testing.assert_allclose(vectors(encode(wde, tiny_st_bert_dir, "-i", path, "--input-format", "jsonl").stdout)[0],
                               expected, atol=1e-6)
    stdin = "\n".join(json.dumps({"text": t, "id": i}) for t, i in zip(TEXTS, IDS))
    assert vectors(encode(wde, tiny_st_bert_dir, "--input-format", "jsonl", stdin=stdin).stdout)[1] == IDS


def test_a_bad_jsonl_line_is_named(wde, tmp_path, tiny_st_bert_dir):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"text": "fine"}) + "\n{not json\n")
    assert one_line_error(wde("encode", "-m", tiny_st_bert_dir, "-i", path)).startswith(
        f"Error: {path} line 2: not JSON (")


def test_empty_input_names_the_file_or_stdin(wde, tmp_path, tiny_st_bert_dir):
    path = tmp_path / "input.txt"
    path.write_text("\n  \n\n", encoding="utf-8")
    assert one_line_error(wde("encode", "-m", tiny_st_bert_dir, "-i", path)) == (
        f"Error: {path}: no texts (empty or only blank lines)")
    assert one_line_error(wde("encode", "-m", tiny_st_bert_dir, stdin="")) == (
        "Error: stdin: no texts (empty or only blank lines)")
    absent = tmp_path / "absent.txt"
    assert one_line_error(wde("encode", "-i", absent)) == f"Error: {absent}: no such file"


# --- output formats ----------------------------------------------------------------------------------
def test_an_unknown_output_suffix_lists_the_known_ones(wde, tmp_path, tiny_st_bert_dir, expected):
    out = tmp_path / "foo.csv"
    assert one_line_error(wde("encode", "-m", tiny_st_bert_dir, "-o", out, *TEXTS), exit_code=2) == (
        f"Error: {out}: unknown output format (suffix '.csv'); known: .npy, .jsonl, .json, .parquet; "
        "or name one with --output-format")
    assert not out.exists()
    encode(wde, tiny_st_bert_dir, "-o", out, "--output-format", "jsonl", *TEXTS)
    np.testing.assert_allclose(vectors(out.read_text(encoding="utf-8"))[0], expected, atol=1e-6)


def test_json_and_parquet_outputs_carry_ids(wde, tmp_path, tiny_st_bert_dir, expected):
    source = tmp_path / "in.jsonl"
    source.write_text("\n".join(json.dumps({"id": i, "text": t}) for i, t in zip(IDS, TEXTS)), encoding="utf-8")
    encode(wde, tiny_st_bert_dir, "-i", source, "-o", tmp_path / "out.json")
    records = json.loads((tmp_path / "out.json").read_text(encoding="utf-8"))
    assert [r["id"] for r in records] == IDS
    np.testing.assert_allclose([r["embedding"] for r in records], expected, atol=1e-6)
    pq = pytest.importorskip("pyarrow.parquet")
    encode(wde, tiny_st_bert_dir, "-i", source, "-o", tmp_path / "out.parquet")
    table = pq.read_table(tmp_path / "out.parquet")
    assert table.column_names == ["id", "embedding"] and table.column("id").to_pylist() == IDS
    np.testing.assert_allclose(table.column("embedding").to_pylist(), expected, atol=1e-6)


def test_npy_output_writes_ids_beside_it(wde, tmp_path, tiny_st_bert_dir, expected):
    source = tmp_path / "in.jsonl"
    source.write_text("\n".join(json.dumps({"id": i, "text": t}) for i, t in zip(IDS, TEXTS)), encoding="utf-8")
    result = encode(wde, tiny_st_bert_dir, "-i", source, "-o", tmp_path / "foo.npy")
    np.testing.assert_allclose(np.load(tmp_path / "foo.npy"), expected, atol=1e-6)
    assert json.loads((tmp_path / "foo.ids.json").read_text(encoding="utf-8")) == IDS
    assert f"ids written beside it to {tmp_path / 'foo.ids.json'}" in result.stderr
    encode(wde, tiny_st_bert_dir, "-o", tmp_path / "plain.npy", *TEXTS)
    assert not (tmp_path / "plain.ids.json").exists()
    assert one_line_error(wde("encode", "-m", tiny_st_bert_dir, "--output-format", "npy", "x"), exit_code=2) == (
        "Error: --output-format npy needs --output FILE")
