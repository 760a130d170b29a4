"""``wde encode --output-type sparse`` (wde-batch) on learned sparse encoders: JSON lines on stdout, ``.jsonl`` and
``.json`` files hold each input's ``{token_id: weight}`` equal to ``SparseEncoder.encode_query`` /
``encode_document`` (same non-zero ids, weights within 1e-4); ``--prompt-name`` picks the Router's route,
``--engine-arg max_active_dims=N`` keeps the N largest; formats that cannot hold the weights are refused first."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from test_splade import TEXTS, TOL, reference
from wde_core.cli.main import cli
from splade_models import mlm_dir, splade_dir, router_dir  # noqa: F401 (fixtures)

IDS = [f"doc-{i}" for i in range(len(TEXTS))]


@pytest.fixture
def wde(isolated_host):
    """Run ``wde ARGS...`` in process on a fresh host."""
    isolated_host.register_commands(cli)
    return lambda *args, stdin=None: CliRunner().invoke(cli, [str(a) for a in args], input=stdin)


def encode(wde, model, *args, stdin=None):
    result = wde("encode", "-m", model, "--device", "cpu", "-q", *args, stdin=stdin)
    assert result.exit_code == 0, (result.output, result.exception)
    return result


def assert_weights(records: list[dict], ref: np.ndarray, key: str = "sparse") -> None:
    """Each record's ``{"token_id": weight}`` (JSON keys are strings) has SparseEncoder's ids and weights."""
    assert len(records) == len(ref)
    for record, want in zip(records, ref):
        ids = np.flatnonzero(want)
        got = {int(k): v for k, v in record[key].items()}
        assert sorted(got) == ids.tolist()
        assert np.abs(np.array([got[i] for i in ids]) - want[ids]).max() <= TOL


def test_stdout_jsonl_holds_the_sparse_weights(wde, splade_dir):
    out = encode(wde, splade_dir, "--output-type", "sparse", *TEXTS).stdout
    records = [json.loads(line) for line in out.splitlines()]
    assert all(set(r) == {"sparse"} for r in records)
    assert_weights(records, reference(splade_dir, "document"))


@pytest.mark.parametrize("prompt_name", ["query", "document"])
def test_router_jsonl_file_with_ids_by_prompt_name(wde, router_dir, tmp_path, prompt_name):
    source, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    source.write_text("".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in zip(IDS, TEXTS)), encoding="utf-8")
    encode(wde, router_dir, "-i", source, "-o", out, "--output-type", "sparse", "--prompt-name", prompt_name)
    records = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [r["id"] for r in records] == IDS and all(list(r) == ["id", "sparse"] for r in records)
    assert_weights(records, reference(router_dir, prompt_name))


def test_sparse_and_dense_in_a_json_file_and_max_active_dims(wde, splade_dir, tmp_path):
    out = tmp_path / "out.json"
    encode(wde, splade_dir, "-o", out, "--output-type", "sparse", "--output-type", "dense",
           "--engine-arg", "max_active_dims=3", *TEXTS)
    records = json.loads(out.read_text(encoding="utf-8"))
    ref = reference(splade_dir, "document", max_active_dims=3)
    assert (np.count_nonzero(ref, axis=1) == 3).all()
    assert_weights(records, ref)
    dense = np.array([r["dense"] for r in records])  # the vocabulary-sized vector, top 3 kept
    assert dense.shape == ref.shape and np.abs(dense - ref).max() <= TOL


@pytest.mark.parametrize("output", ["out.npy", "out.parquet"])
def test_formats_without_room_for_weights_are_refused_before_the_model_loads(wde, splade_dir, tmp_path, output):
    result = wde("encode", "-m", splade_dir, "-o", tmp_path / output, "--output-type", "sparse", "hello")
    assert result.exit_code == 2 and not (tmp_path / output).exists()
    assert f"--output-type sparse needs a .jsonl output (or .json), not .{output.split('.')[1]}" in result.output
