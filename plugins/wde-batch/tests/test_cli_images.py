"""``wde encode`` with images (issue 25): ``--image`` files after the texts, an ``image`` field of ``.jsonl`` and
``.json`` records (paths relative to the file, data URLs), image columns of ``.csv`` and ``.parquet`` (paths,
bytes); every vector equal to ``Engine.encode`` of the same items, and bad records named by line or row."""

from __future__ import annotations

import base64
import csv
import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from wde_plugin_kit.image_builders import random_images, save_random_clip
from wde_core import Engine
from wde_core.cli.main import cli

TOL = 1e-5
TEXTS = ["a photo of a cat", "a diagram"]


@pytest.fixture
def wde(isolated_host):
    """Run ``wde ARGS...`` in process on a fresh host (entry points on: wde-clip serves CLIPModel)."""
    isolated_host.register_commands(cli)
    return lambda *args, stdin=None: CliRunner().invoke(cli, [str(a) for a in args], input=stdin)


@pytest.fixture(scope="module")
def clip_dir(tmp_path_factory) -> Path:
    pytest.importorskip("wde_clip")
    return save_random_clip(tmp_path_factory.mktemp("clip") / "clip", "clip")


@pytest.fixture(scope="module")
def pictures(tmp_path_factory) -> list[Path]:
    """Four PNG files of odd sizes and modes, in a folder of their own."""
    folder = tmp_path_factory.mktemp("pictures")
    paths = []
    for i, picture in enumerate(random_images(4, seed=5)):
        paths.append(folder / f"p{i}.png")
        picture.save(paths[-1])
    return paths


def engine_encode(model: Path, items: list) -> np.ndarray:
    with Engine(str(model), device="cpu") as engine:
        return engine.encode(items)


def ok(result):
    assert result.exit_code == 0, (result.output, result.exception)
    return result


def vectors(jsonl: str) -> tuple[np.ndarray, list]:
    records = [json.loads(line) for line in jsonl.splitlines()]
    return np.array([r["embedding"] for r in records], dtype=np.float32), [r.get("id") for r in records]


def error_line(result, exit_code: int = 1) -> str:
    assert result.exit_code == exit_code, result.output
    assert isinstance(result.exception, SystemExit) and "Traceback" not in result.output
    return result.stderr.strip().splitlines()[-1]


def data_url(path: Path) -> str:
    return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode()


# --- values -------------------------------------------------------------------------------------------------
def test_image_options_follow_the_texts_in_order(wde, clip_dir, pictures):
    out = ok(wde("encode", "-m", clip_dir, "--device", "cpu", TEXTS[0], "--image", pictures[1], TEXTS[1],
                 "--image", pictures[0])).stdout
    got, _ = vectors(out)
    expected = engine_encode(clip_dir, [TEXTS[0], TEXTS[1], pictures[1], pictures[0]])
    assert got.shape == expected.shape == (4, 24)
    assert np.abs(got - expected).max() <= TOL
    assert np.abs(got[2] - got[3]).max() > 1e-3  # two images, two vectors
    only = vectors(ok(wde("encode", "-m", clip_dir, "--device", "cpu", "--image", pictures[2])).stdout)[0]
    assert np.abs(only - engine_encode(clip_dir, [pictures[2]])).max() <= TOL


def test_jsonl_records_mix_texts_relative_paths_and_data_urls(wde, clip_dir, pictures, tmp_path, monkeypatch):
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "sub").mkdir()
    (folder / "sub" / "a.png").write_bytes(pictures[0].read_bytes())
    records = [{"id": "t", "text": TEXTS[0]}, {"id": "rel", "image": "sub/a.png"},
               {"id": "abs", "image": str(pictures[1])}, {"id": "url", "image": data_url(pictures[2])}]
    (folder / "in.jsonl").write_text("\n".join(json.dumps(r) for r in records) + "\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)  # relative paths are the file's, not the working directory's
    ok(wde("encode", "-m", clip_dir, "--device", "cpu", "-i", "in/in.jsonl", "-o", tmp_path / "out.npy"))
    expected = engine_encode(clip_dir, [TEXTS[0], pictures[0], pictures[1], {"image": data_url(pictures[2])}])
    assert np.abs(np.load(tmp_path / "out.npy") - expected).max() <= TOL
    assert json.loads((tmp_path / "out.ids.json").read_text()) == ["t", "rel", "abs", "url"]


def test_json_csv_and_parquet_image_columns(wde, clip_dir, pictures, tmp_path):
    pa, pq = pytest.importorskip("pyarrow"), pytest.importorskip("pyarrow.parquet")
    expected = engine_encode(clip_dir, [pictures[0], TEXTS[1], pictures[3]])
    (tmp_path / "in.json").write_text(json.dumps([{"pic": pictures[0].name}, {"text": TEXTS[1]},
                                                  {"pic": pictures[3].name}]))
    (tmp_path / "in.csv").write_text(f"id,text,pic\n1,,{pictures[0]}\n2,{TEXTS[1]},\n3,,{pictures[3]}\n")
    pq.write_table(pa.table({"id": [1, 2, 3], "text": [None, TEXTS[1], None],
                             "pic": [pictures[0].read_bytes(), None, pictures[3].read_bytes()]}),
                   tmp_path / "in.parquet")
    for name in ("in.json", "in.csv", "in.parquet"):
        source = tmp_path / name
        if name == "in.json":  # the paths are relative to the pictures' folder: read it from there
            source = pictures[0].parent / name
            source.write_text((tmp_path / name).read_text())
        got, ids = vectors(ok(wde("encode", "-m", clip_dir, "--device", "cpu", "-i", source,
                                  "--image-column", "pic")).stdout)
        assert np.abs(got - expected).max() <= TOL, name
        assert ids == ([None] * 3 if name == "in.json" else (["1", "2", "3"] if name == "in.csv" else [1, 2, 3]))


def test_a_parquet_column_of_images_alone_and_of_paths(wde, clip_dir, pictures, tmp_path):
    pa, pq = pytest.importorskip("pyarrow"), pytest.importorskip("pyarrow.parquet")
    pq.write_table(pa.table({"image": [p.read_bytes() for p in pictures]}), tmp_path / "bytes.parquet")
    pq.write_table(pa.table({"image": [p.name for p in pictures]}), pictures[0].parent / "paths.parquet")
    expected = engine_encode(clip_dir, pictures)
    for source in (tmp_path / "bytes.parquet", pictures[0].parent / "paths.parquet"):
        ok(wde("encode", "-m", clip_dir, "--device", "cpu", "-i", source, "-o", tmp_path / "out.parquet"))
        table = pq.read_table(tmp_path / "out.parquet")
        assert table.column_names == ["embedding"]
        assert np.abs(np.asarray(table.column("embedding").to_pylist()) - expected).max() <= TOL


# --- bad inputs, named by line or row -----------------------------------------------------------------------
def write_jsonl(path: Path, records: list) -> Path:
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize("record, message", [
    ({"text": "x", "image": "a.png"}, "has both 'text' and 'image'; give one of them"),
    ({"image": "missing.png"}, "field 'image': no such file '{dir}/missing.png'"),
    ({"image": "https://example.com/cat.png"}, "field 'image' is a URL (https://example.com/cat.png); wde encode "
                                               "reads local files and data:image/...;base64, URLs only"),
    ({"image": 7}, "field 'image' must be a file path or a data:image/...;base64, URL, not int"),
    ({"id": 2}, "field 'text' must be a string"),
])
def test_a_bad_jsonl_record_is_named_by_its_line(wde, tiny_st_bert_dir, tmp_path, record, message):
    path = write_jsonl(tmp_path / "in.jsonl", [{"text": "fine"}, record])
    expected = f"Error: {path} line 2: " + message.format(dir=tmp_path)
    assert error_line(wde("encode", "-m", tiny_st_bert_dir, "-i", path)) == expected


def test_a_bad_table_row_is_named(wde, tiny_st_bert_dir, tmp_path):
    path = tmp_path / "in.csv"
    with open(path, "w", newline="") as f:
        csv.writer(f).writerows([["text", "image"], ["fine", ""], ["", ""], ["x", "a.png"]])
    assert error_line(wde("encode", "-m", tiny_st_bert_dir, "-i", path)) == (
        f"Error: {path} row 2: no value in column 'text' or 'image'; give one of them")
    pa, pq = pytest.importorskip("pyarrow"), pytest.importorskip("pyarrow.parquet")
    path = tmp_path / "in.parquet"
    pq.write_table(pa.table({"text": ["a", "b", None], "image": [None, b"x", None]}), path)
    assert error_line(wde("encode", "-m", tiny_st_bert_dir, "-i", path)) == (
        f"Error: {path} row 2: has both 'text' and 'image'; give one of them")
    pq.write_table(pa.table({"image": [b"x", None]}), path)
    assert error_line(wde("encode", "-m", tiny_st_bert_dir, "-i", path)) == (
        f"Error: {path} row 2: no value in column 'text' or 'image'; give one of them")
    pq.write_table(pa.table({"body": ["a"]}), path)
    assert error_line(wde("encode", "-m", tiny_st_bert_dir, "-i", path)) == (
        f"Error: {path}: no column 'text' (columns: body); name one with --column")


def test_an_image_that_does_not_decode_is_named_by_its_line(wde, clip_dir, pictures, tmp_path):
    (tmp_path / "broken.png").write_bytes(b"not a png at all")
    path = write_jsonl(tmp_path / "in.jsonl", [{"image": str(pictures[0])}, {"text": "ok"},
                                               {"image": "broken.png"}])
    assert error_line(wde("encode", "-m", clip_dir, "--device", "cpu", "-i", path)) == (
        f"Error: {path} line 3: field 'image' is not an image file PIL can read")
    assert error_line(wde("encode", "-m", clip_dir, "--device", "cpu", "--image", tmp_path / "broken.png")) == (
        f"Error: --image {tmp_path / 'broken.png'}: field 'image' is not an image file PIL can read")


def test_a_text_model_refuses_an_image_naming_where_it_came_from(wde, tiny_st_bert_dir, pictures, tmp_path):
    line = error_line(wde("encode", "-m", tiny_st_bert_dir, "--device", "cpu", "hello", "--image", pictures[0]))
    assert line == (f"Error: --image {pictures[0]}: field 'text' must be a str, got an image, and this model reads "
                    "text only")
    path = write_jsonl(tmp_path / "in.jsonl", [{"text": "hello"}, {"image": str(pictures[1])}])
    assert error_line(wde("encode", "-m", tiny_st_bert_dir, "--device", "cpu", "-i", path)) == (
        f"Error: {path} line 2: field 'text' must be a str, got an image, and this model reads text only")


def test_image_usage_errors(wde, tiny_st_bert_dir, pictures, tmp_path):
    path = write_jsonl(tmp_path / "in.jsonl", [{"text": "hello"}])
    assert error_line(wde("encode", "-m", tiny_st_bert_dir, "-i", path, "--image", pictures[0]), exit_code=2) == (
        "Error: give texts (or --image) as arguments or --input, not both")
    assert error_line(wde("encode", "-m", tiny_st_bert_dir, "--image", pictures[0], str(pictures[1])),
                      exit_code=2) == (f"Error: '{pictures[1]}' names an image file, and an argument is embedded as "
                                       f"text: pass it as --image {pictures[1]} (one --image per file)")
    missing = tmp_path / "nope.png"
    line = error_line(wde("encode", "-m", tiny_st_bert_dir, "--image", missing))
    assert line == f"Error: --image {missing}: no such file"


def test_the_help_says_the_order(wde):
    shown = " ".join(wde("encode", "--help").output.split())
    assert "--image" in shown and "after the TEXTS, in order" in shown and "--image-column" in shown


def test_images_from_stdin_jsonl_resolve_against_the_working_directory(wde, clip_dir, pictures, monkeypatch):
    monkeypatch.chdir(pictures[0].parent)
    stdin = json.dumps({"image": pictures[1].name}) + "\n" + json.dumps({"text": TEXTS[0]}) + "\n"
    got = vectors(ok(wde("encode", "-m", clip_dir, "--device", "cpu", "--input-format", "jsonl",
                         stdin=stdin)).stdout)[0]
    assert np.abs(got - engine_encode(clip_dir, [pictures[1], TEXTS[0]])).max() <= TOL


def test_an_engine_error_about_a_text_from_a_file_names_its_line(wde, tiny_st_bert_dir, tmp_path):
    path = write_jsonl(tmp_path / "in.jsonl", [{"text": "short"}, {"text": "word " * 200}])
    line = error_line(wde("encode", "-m", tiny_st_bert_dir, "--device", "cpu", "--no-truncate", "-i", path))
    assert line.startswith(f"Error: {path} line 2: field 'text' has 202 tokens, more than max_model_len=128")


def test_a_datasets_image_struct_column(wde, clip_dir, pictures, tmp_path):
    pa, pq = pytest.importorskip("pyarrow"), pytest.importorskip("pyarrow.parquet")
    structs = [{"bytes": pictures[0].read_bytes(), "path": None}, {"bytes": None, "path": str(pictures[1])}]
    pq.write_table(pa.table({"image": structs}), tmp_path / "in.parquet")
    got = vectors(ok(wde("encode", "-m", clip_dir, "--device", "cpu", "-i", tmp_path / "in.parquet")).stdout)[0]
    assert np.abs(got - engine_encode(clip_dir, pictures[:2])).max() <= TOL
