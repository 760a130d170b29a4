"""wde-ray on a real local Ray (``ray.init(num_cpus=2)``, started here): embed/rerank parity with ``Engine`` on the
2,000 wiki paragraphs with 2 actors, ``wde embed-dataset`` round trips, an actor killed mid-run, bad rows, and
``wde serve-ray`` / ``serve_app`` answering from two replicas. Run by ``nox -s ray``."""

from __future__ import annotations

import json
import os
import signal
import sys
import time

import numpy as np
import pytest

pytest.importorskip("wde_ray")  # the other sessions collect this file too: skip before Ray-only imports
ray = pytest.importorskip("ray")

import psutil  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from click.testing import CliRunner  # noqa: E402

from wde_plugin_kit.corpus import WIKI_NAME, shared_dir  # noqa: E402
from wde_plugin_kit.encoders import save_bert_classifier  # noqa: E402
from wde_core import Engine, get_plugin_host  # noqa: E402
from wde_core.cli.main import cli  # noqa: E402

pytestmark = pytest.mark.ray

TOL = 1e-6
N = 2000
# 2 actors of half a CPU each leave one of the 2 logical CPUs to Ray Data's own tasks (reading, splitting
# blocks): with both CPUs held by actors those tasks would wait forever; each engine runs 1 thread
POOL = dict(workers=2, num_cpus=0.5)


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    ray.data.DataContext.get_current().enable_progress_bars = False
    yield ray
    from ray import serve

    serve.shutdown()
    ray.shutdown()


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    with open(shared_dir() / WIKI_NAME, encoding="utf-8") as f:
        items = [json.loads(line) for _, line in zip(range(N), f)]
    return [{"id": f"p{i}", "title": item["title"], "text": item["text"], "n": i} for i, item in enumerate(items)]


@pytest.fixture(scope="module")
def reference(rows) -> np.ndarray:
    with Engine(num_threads=2) as engine:
        return engine.encode([r["text"] for r in rows])


def vectors(table_or_rows) -> np.ndarray:
    column = table_or_rows.column("embedding").to_pylist() if isinstance(table_or_rows, pa.Table) else [
        r["embedding"] for r in table_or_rows]
    return np.asarray(column, dtype=np.float32)


def test_embed_matches_engine_on_the_wiki_paragraphs_with_two_actors(local_ray, rows, reference):
    import wde_ray

    out = wde_ray.embed(ray.data.from_items(rows), **POOL).take_all()
    assert [r["id"] for r in out] == [r["id"] for r in rows]  # each row once, in input order
    assert [r["title"] for r in out] == [r["title"] for r in rows]
    got = vectors(out)
    assert got.shape == (N, 384)
    assert np.abs(got - reference).max() <= TOL


def test_rerank_matches_engine_rerank_with_two_actors(local_ray, rows, tmp_path):
    import wde_ray

    model = str(save_bert_classifier(tmp_path / "ce", seed=3))
    groups = [rows[i:i + 100] for i in range(0, N, 100)]
    pairs = [{"id": d["id"], "query": g[0]["title"], "document": d["text"]} for g in groups for d in g]
    out = wde_ray.rerank(ray.data.from_items(pairs), model, **POOL).take_all()
    assert [r["id"] for r in out] == [p["id"] for p in pairs]
    with Engine(model, num_threads=2) as engine:
        expected = []
        for g in groups:
            ranked = sorted(engine.rerank(g[0]["title"], [d["text"] for d in g]), key=lambda r: r["index"])
            expected += [r["score"] for r in ranked]
    scores = np.array([r["score"] for r in out])
    assert np.abs(scores - np.array(expected)).max() <= TOL
    assert scores.std() > 0  # a real spread of scores, not one constant


def write_jsonl(path, rows) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


def run_cli(*args: str):
    get_plugin_host().register_commands(cli)
    return CliRunner().invoke(cli, ["embed-dataset", *args, "--workers", "2", "--num-cpus", "0.5",
                                    "--batch-size", "50"])


@pytest.mark.parametrize("kind", ["jsonl", "parquet"])
def test_embed_dataset_round_trip_keeps_every_column_and_order(local_ray, rows, reference, tmp_path, kind):
    source = tmp_path / "in"
    source.mkdir()
    for part, start in enumerate((0, 150)):  # a folder of two files, read in name order
        chunk = rows[start:start + 150]
        if kind == "jsonl":
            write_jsonl(source / f"part-{part}.jsonl", chunk)
        else:
            pq.write_table(pa.Table.from_pylist(chunk), source / f"part-{part}.parquet")
    result = run_cli(str(source), str(tmp_path / "out"))
    assert result.exit_code == 0, result.output
    table = pq.read_table(tmp_path / "out")
    assert table.column("id").to_pylist() == [r["id"] for r in rows[:300]]
    assert table.column("n").to_pylist() == list(range(300))
    assert table.column("title").to_pylist() == [r["title"] for r in rows[:300]]
    assert np.abs(vectors(table) - reference[:300]).max() <= TOL


def test_a_bad_row_stops_the_cli_naming_its_id_and_column(local_ray, rows, tmp_path):
    write_jsonl(tmp_path / "in.jsonl", [*rows[:3], {"id": "blank", "title": "", "text": "  ", "n": 3}])
    result = run_cli(str(tmp_path / "in.jsonl"), str(tmp_path / "out"))
    assert result.exit_code == 1
    assert "row id='blank', column 'text': empty text" in result.output


def test_on_error_null_gives_null_vectors_and_an_error_column(local_ray, rows, reference):
    import wde_ray

    bad = {1: None, 2: "", 4: "word " * 400}
    items = [{"id": i, "text": bad.get(i, rows[i]["text"])} for i in range(6)]
    out = wde_ray.embed(ray.data.from_items(items), on_error="null", truncate=False, num_cpus=0.5).take_all()
    assert [r["id"] for r in out] == list(range(6))
    assert [r["error"] for r in out] == [
        None, "column 'text': expected a string, got NoneType", "column 'text': empty text (pass allow_empty=True "
        "to embed it)", None, "column 'text': has 402 tokens, more than max_model_len=256; shorten it or pass "
        "truncate=True", None]
    for r in out:
        if r["id"] in bad:
            assert r["embedding"] is None
        else:
            assert np.abs(np.asarray(r["embedding"]) - reference[r["id"]]).max() <= TOL


def test_a_non_string_column_raises_naming_the_row(local_ray):
    import wde_ray
    from wde_ray.files import find_cause

    with pytest.raises(wde_ray.RowError) as info:
        wde_ray.embed(ray.data.from_items([{"id": "x7", "text": 5}]), num_cpus=0.5).take_all()
    row = find_cause(info.value, wde_ray.RowError)
    assert str(row).split("\n")[0] == "row id='x7', column 'text': expected a string, got int"


def map_workers() -> dict[int, psutil.Process]:
    """The Ray Data actor processes started under this test process."""
    found = {}
    for p in psutil.Process().children(recursive=True):
        try:
            if "MapWorker" in " ".join(p.cmdline()):
                found[p.pid] = p
        except psutil.NoSuchProcess:
            continue
    return found


def test_an_actor_killed_mid_run_loses_and_duplicates_no_row(local_ray, rows, reference):
    import wde_ray

    n = 600
    ds = wde_ray.embed(ray.data.from_items(rows[:n]), batch_size=20, **POOL)
    seen, killed, before = [], None, {}
    for batch in ds.iter_batches(batch_format="pyarrow", batch_size=None):
        seen.append(batch)
        if killed is None:
            before = map_workers()
            assert len(before) == 2
            killed = next(iter(before))
            os.kill(killed, signal.SIGKILL)
            rows_at_kill = sum(b.num_rows for b in seen)
    table = pa.concat_tables(seen)
    assert rows_at_kill < n // 2  # the kill came while most of the work was still to do
    assert not psutil.pid_exists(killed) or psutil.Process(killed).status() == psutil.STATUS_ZOMBIE
    assert table.column("id").to_pylist() == [r["id"] for r in rows[:n]]
    assert np.abs(vectors(table) - reference[:n]).max() <= TOL


def embeddings_of(answer: dict) -> np.ndarray:
    return np.array([d["embedding"] for d in answer["data"]], dtype=np.float32)


@pytest.fixture(scope="module")
def wde_serve_answer(rows) -> tuple[list[str], dict]:
    """What plain ``wde serve``'s app answers to /v1/embeddings (in process), checked against ``Engine``."""
    from starlette.testclient import TestClient
    from wde_server.public import create_app

    texts = [r["text"] for r in rows if len(r["text"].split()) < 150][:8]  # within the OpenAI route's limit
    with TestClient(create_app([None], num_threads=1)) as client:
        answer = client.post("/v1/embeddings", json={"input": texts}).json()
    with Engine(num_threads=1) as engine:
        assert np.abs(embeddings_of(answer) - engine.encode(texts)).max() <= TOL
    return texts, answer


def ask_until_two_replicas(url: str, texts: list[str]) -> list[tuple[str, dict]]:
    """POST /v1/embeddings, 8 at a time, until two replicas have answered (at most 48 requests)."""
    import httpx
    from concurrent.futures import ThreadPoolExecutor

    answers: list[tuple[str, dict]] = []
    with ThreadPoolExecutor(8) as pool:
        for _ in range(6):
            for r in pool.map(lambda _: httpx.post(url + "/v1/embeddings", json={"input": texts}, timeout=120),
                              range(8)):
                assert r.status_code == 200, r.text
                answers.append((r.headers["x-wde-replica"], r.json()))
            if len({replica for replica, _ in answers}) == 2:
                break
    return answers


def assert_same_as_wde_serve(answers: list[tuple[str, dict]], expected: dict) -> None:
    assert len({replica for replica, _ in answers}) == 2
    for _, answer in answers:
        assert answer["model"] == expected["model"] and answer["usage"] == expected["usage"]
        assert np.abs(embeddings_of(answer) - embeddings_of(expected)).max() <= TOL


def test_serve_app_answers_from_two_replicas_as_wde_serve_does(local_ray, wde_serve_answer):
    import wde_ray
    from ray import serve
    from wde_plugin_kit.serve import free_port

    texts, expected = wde_serve_answer
    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    serve.run(wde_ray.serve_app([None], num_replicas=2, num_cpus=0.5), name="wde", route_prefix="/")
    try:
        assert_same_as_wde_serve(ask_until_two_replicas(f"http://127.0.0.1:{port}", texts), expected)
    finally:
        serve.shutdown()


def test_wde_serve_ray_replicas_on_a_given_cluster(local_ray, wde_serve_answer, tmp_path):
    import httpx
    from wde_plugin_kit.serve import ServeProcess

    texts, expected = wde_serve_answer
    address = ray.get_runtime_context().gcs_address
    server = ServeProcess("--replicas", "2", "--address", address, "--engine-arg", "num_threads=1",
                          log=tmp_path / "serve.log", timeout=300, command="serve-ray")
    try:
        deadline = time.monotonic() + 300
        while httpx.get(server.url + "/health", timeout=30).status_code != 200:
            assert time.monotonic() < deadline, server.log()
            time.sleep(1)
        assert_same_as_wde_serve(ask_until_two_replicas(server.url, texts), expected)
    finally:
        assert server.stop() == 0, server.log()


def test_serve_ray_is_wde_rays_command_and_wde_serve_points_there():
    host = get_plugin_host()
    host.register_commands(cli)
    assert "serve-ray" in cli.commands and "wde-ray" in host.plugins
    shown = CliRunner().invoke(cli, ["serve", "--ray", "--replicas", "2"])
    assert shown.exit_code == 2 and "serving on Ray moved to wde-ray's command `wde serve-ray`" in shown.output
    assert "--ray" not in CliRunner().invoke(cli, ["serve", "--help"]).output


def save_random_bge_m3(directory) -> str:
    """A random XLM-R with bge-m3's two head files beside it (the bge-m3 variant of wde-xlm-roberta)."""
    import torch
    from transformers import XLMRobertaConfig, XLMRobertaModel

    from wde_plugin_kit import save_random_model

    config = XLMRobertaConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                              max_position_embeddings=130, architectures=["XLMRobertaModel"])
    save_random_model(directory, config, model_class=XLMRobertaModel, tokenizer="bpe",
                      st=dict(pooling="cls", normalize=True))
    torch.manual_seed(3)
    torch.save(torch.nn.Linear(32, 32).state_dict(), directory / "colbert_linear.pt")
    torch.save(torch.nn.Linear(32, 1).state_dict(), directory / "sparse_linear.pt")
    return str(directory)


def test_options_and_bge_m3_outputs_pass_through(local_ray, rows, tmp_path):
    import wde_ray

    texts = [r["text"] for r in rows[:40]]
    items = [{"id": r["id"], "text": r["text"]} for r in rows[:40]]
    options = dict(dimensions=16, normalize=False, prompt="query: ")
    out = wde_ray.embed(ray.data.from_items(items), **options, **POOL).take_all()
    with Engine(num_threads=1) as engine:
        expected = engine.encode(texts, **options)
    assert [r["id"] for r in out] == [r["id"] for r in items]
    assert np.abs(vectors(out) - expected).max() <= TOL and vectors(out).shape == (40, 16)
    model = save_random_bge_m3(tmp_path / "bge-m3")
    out = wde_ray.embed(ray.data.from_items(items), model, output=("dense", "sparse", "colbert"), **POOL).take_all()
    with Engine(model, num_threads=1) as engine:
        expected = engine.encode(texts, output=("dense", "sparse", "colbert"))
    for row, dense, sparse, colbert in zip(out, expected["dense"], expected["sparse"], expected["colbert"]):
        assert np.abs(np.asarray(row["embedding_dense"]) - dense).max() <= TOL
        assert np.abs(np.asarray(row["embedding_colbert"]) - colbert).max() <= TOL
        assert {int(k): v for k, v in _sparse_items(row["embedding_sparse"])} == pytest.approx(
            {int(k): v for k, v in sparse.items()}, abs=TOL)


def test_embed_dataset_writes_splade_sparse_outputs(local_ray, rows, tmp_path):
    from wde_plugin_kit.encoders import save_mlm, save_splade

    model = str(save_splade(tmp_path / "splade", save_mlm(tmp_path / "mlm")))
    items = [{"id": r["id"], "text": r["text"]} for r in rows[:24]]
    write_jsonl(tmp_path / "in.jsonl", items)
    result = run_cli(str(tmp_path / "in.jsonl"), str(tmp_path / "out"), "--model", model, "--output", "sparse",
                     "--output-column", "terms")
    assert result.exit_code == 0, result.output
    out = pq.read_table(tmp_path / "out").to_pylist()
    with Engine(model, num_threads=1) as engine:
        expected = engine.encode([r["text"] for r in items], output="sparse")
    assert [r["id"] for r in out] == [r["id"] for r in items]
    for row, sparse in zip(out, expected):
        got = {int(k): v for k, v in _sparse_items(row["terms"])}
        assert set(got) == {int(k) for k in sparse} and len(got) > 3
        assert got == pytest.approx({int(k): v for k, v in sparse.items()}, abs=TOL)


def _sparse_items(value):
    """A sparse output as Ray returns it: a dict, or a list of (key, value) pairs (Arrow maps)."""
    return value.items() if isinstance(value, dict) else value


# --- image columns (issue 25): a tiny random CLIP, images as Parquet bytes or paths -------------------------------
@pytest.fixture(scope="module")
def clip_images(tmp_path_factory) -> tuple[str, list]:
    """A tiny random CLIP and 12 PNG files of odd sizes and modes."""
    from wde_plugin_kit.image_builders import random_images, save_random_clip

    root = tmp_path_factory.mktemp("clip")
    paths = []
    for i, picture in enumerate(random_images(12, seed=2)):
        paths.append(root / "pictures" / f"p{i:02d}.png")
        paths[-1].parent.mkdir(exist_ok=True)
        picture.save(paths[-1])
    return str(save_random_clip(root / "clip", "clip")), paths


@pytest.fixture(scope="module")
def clip_reference(clip_images) -> np.ndarray:
    model, paths = clip_images
    with Engine(model, num_threads=1) as engine:
        return engine.encode(paths)


def test_embed_an_image_column_of_bytes_matches_engine(local_ray, clip_images, clip_reference):
    import wde_ray

    model, paths = clip_images
    items = [{"id": f"i{k}", "caption": f"picture {k}", "image": p.read_bytes()} for k, p in enumerate(paths)]
    out = wde_ray.embed(ray.data.from_items(items), model, image_column="image", batch_size=4, **POOL).take_all()
    assert [r["id"] for r in out] == [r["id"] for r in items]
    assert [r["caption"] for r in out] == [r["caption"] for r in items]
    got = vectors(out)
    assert got.shape == clip_reference.shape == (12, 24)
    assert np.abs(got - clip_reference).max() <= 1e-5


def test_embed_dataset_reads_an_image_column_of_relative_paths(local_ray, clip_images, clip_reference, tmp_path):
    model, paths = clip_images
    source = paths[0].parent / "images.parquet"  # paths relative to the file's folder
    pq.write_table(pa.table({"id": [p.stem for p in paths], "file": [p.name for p in paths]}), source)
    result = run_cli(str(source), str(tmp_path / "out"), "--model", model, "--image-column", "file")
    assert result.exit_code == 0, result.output
    table = pq.read_table(tmp_path / "out")
    assert table.column("id").to_pylist() == [p.stem for p in paths]
    assert table.column("file").to_pylist() == [p.name for p in paths]
    assert np.abs(vectors(table) - clip_reference).max() <= 1e-5


def test_bad_image_rows_are_named_or_nulled(local_ray, clip_images, clip_reference, tmp_path):
    import wde_ray
    from wde_ray.files import find_cause

    model, paths = clip_images
    (tmp_path / "broken.png").write_bytes(b"not an image")
    values = [str(paths[0]), None, str(tmp_path / "broken.png"), str(paths[3]), "https://x.org/a.png"]
    items = [{"id": f"r{k}", "image": v} for k, v in enumerate(values)]
    out = wde_ray.embed(ray.data.from_items(items), model, image_column="image", on_error="null",
                        num_cpus=0.5).take_all()
    assert [r["error"] for r in out] == [
        None, "column 'image': expected an image (bytes, a file path or a data:image/...;base64, URL), got NoneType",
        "column 'image': is not an image file PIL can read", None, "column 'image': a URL (https://x.org/a.png); wde "
        "fetches nothing: give the image's bytes or a path every actor can read"]
    assert np.abs(np.asarray(out[0]["embedding"]) - clip_reference[0]).max() <= 1e-5
    assert np.abs(np.asarray(out[3]["embedding"]) - clip_reference[3]).max() <= 1e-5
    assert all(r["embedding"] is None for r in out if r["error"])
    with pytest.raises(wde_ray.RowError) as info:
        wde_ray.embed(ray.data.from_items([{"id": "n7", "image": 7}]), model, image_column="image",
                      num_cpus=0.5).take_all()
    row = find_cause(info.value, wde_ray.RowError)
    assert str(row).split("\n")[0] == ("row id='n7', column 'image': expected an image (bytes, a file path or a "
                                       "data:image/...;base64, URL), got int")
