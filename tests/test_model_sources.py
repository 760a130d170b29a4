"""Finding models: local directories, the packaged default, a prepared offline hub cache."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from wde_core import Engine, assemble_pipeline
from wde_core.assembly.model_files import ModelNotFoundError

MINILM_ID = "sentence-transformers/all-MiniLM-L6-v2"


def test_default_model_is_the_packaged_minilm(minilm_dir, monkeypatch):
    monkeypatch.delenv("WDE_DEFAULT_MODEL", raising=False)
    pipeline = assemble_pipeline()
    assert pipeline.model.name == MINILM_ID
    assert pipeline.model.path == minilm_dir
    assert pipeline.model.found_by == "local copy registered by wde-bert"
    assert pipeline.reasons["model"].startswith("no model given")


def test_hub_id_and_directory_give_the_same_embeddings(minilm_dir):
    texts = ["same model", "two names"]
    by_id = Engine(MINILM_ID).encode(texts)
    by_path = Engine(str(minilm_dir)).encode(texts)
    assert np.array_equal(by_id, by_path)


def test_default_model_can_be_overridden_by_environment(tiny_bert_dir, monkeypatch):
    monkeypatch.setenv("WDE_DEFAULT_MODEL", str(tiny_bert_dir))
    pipeline = assemble_pipeline()
    assert pipeline.model.path == tiny_bert_dir.resolve()
    assert "WDE_DEFAULT_MODEL" in pipeline.reasons["model"]


def make_hub_cache(cache, repo_id: str, source) -> None:
    """Lay out ``source`` as huggingface_hub's cache does: blobs behind a snapshot and refs/main."""
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    commit = "0123456789abcdef0123456789abcdef01234567"
    snapshot = repo / "snapshots" / commit
    shutil.copytree(source, snapshot)
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)


def run_offline(code: str, cache) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_CACHE": str(cache), "HF_HUB_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)


def test_hub_id_resolves_from_a_prepared_offline_cache(tiny_st_bert_dir, tmp_path):
    make_hub_cache(tmp_path / "cache", "acme/tiny-bert", tiny_st_bert_dir)
    code = (
        "import json; from wde_core import Engine\n"
        "e = Engine('acme/tiny-bert')\n"
        "print(json.dumps({'found_by': e.pipeline.model.found_by, 'v': e.encode('cached').tolist()}))\n"
    )
    result = run_offline(code, tmp_path / "cache")
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out["found_by"] == "hub cache"
    expected = Engine(str(tiny_st_bert_dir)).encode("cached")
    assert np.abs(np.array(out["v"]) - expected).max() <= 1e-6


def test_unknown_hub_id_offline_is_a_clear_error(tmp_path):
    code = "from wde_core import Engine\nEngine('acme/does-not-exist')\n"
    result = run_offline(code, tmp_path)
    assert result.returncode != 0
    assert "ModelNotFoundError: model 'acme/does-not-exist' is not a local directory" in result.stderr


def test_a_path_that_is_no_directory_nor_hub_id_is_refused():
    with pytest.raises(ModelNotFoundError, match="neither a directory nor a valid hub id"):
        Engine("./no/such/model/dir")


def test_a_directory_without_config_is_refused(tmp_path):
    with pytest.raises(ModelNotFoundError, match="has no config.json"):
        Engine(str(tmp_path))
