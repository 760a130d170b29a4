"""The ``wde`` command line: list-workflows, plugins, inspect, encode and a plugin's own command.

Commands reach the click group through ``wde_register_commands``, so each test registers them on
a fresh plugin host first; ``encode`` results are compared with ``Engine(...).encode``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from conftest import auto_cpu_backend, minilm_path, provider_of
from wde_core import Engine
from wde_core.cli.main import cli

TEXTS = ["The cat sat on the mat.", "Embeddings map text to vectors", "short"]
BERT_ARCHS = ["BertForMaskedLM", "BertForPreTraining", "BertModel"]
CORE_STAGES = {"input_processor": "text", "tokenizer": "hf-fast", "scheduler": "token-budget",
               "model_input_builder": "flat", "executor": "sync", "worker": "model",
               "output_processor": "embedding", "engine_args": "default"}


@pytest.fixture
def wde(isolated_host):
    """Run ``wde ARGS...`` in process, on a fresh host whose plugins have added their commands."""
    isolated_host.register_commands(cli)
    runner = CliRunner()
    return lambda *args, stdin=None: runner.invoke(cli, [str(a) for a in args], input=stdin)


@pytest.fixture(scope="module")
def st_engine(tiny_st_bert_dir) -> Engine:
    return Engine(str(tiny_st_bert_dir), device="cpu")


def embeddings_of(jsonl: str) -> tuple[np.ndarray, list]:
    """The vectors and ids (``None`` where absent) of ``wde encode`` JSON lines."""
    records = [json.loads(line) for line in jsonl.splitlines() if line.strip()]
    return np.array([r["embedding"] for r in records], dtype=np.float32), [r.get("id") for r in records]


def ok(result):
    """Assert the command succeeded and return its result."""
    assert result.exit_code == 0, (result.output, result.exception)
    return result


def clean_error(result, exit_code: int = 1) -> str:
    """Assert a handled failure (exit code, no traceback) and return stderr."""
    assert result.exit_code == exit_code, result.output
    assert isinstance(result.exception, SystemExit) and "Traceback" not in result.output
    return result.stderr


# --- list-workflows and plugins ---------------------------------------------------------------------
def test_list_workflows_table(wde):
    out = ok(wde("list-workflows")).stdout
    assert "workflow embed  (from wde-core)  texts -> pooled, optionally normalized embeddings" in out
    rows = {tuple(line.split()) for line in out.splitlines()}
    assert {(a, "embed", "wde-bert") for a in BERT_ARCHS} <= rows  # who linked each architecture
    assert {("input_processor", "text", "wde-core"), ("scheduler", "token-budget", "wde-core"),
            ("attention_backend", "(auto)"), ("scheduler", "shortest-first", "wde-example")} <= rows
    assert ("ExampleBagOfEmbeddings", "embed", "wde-example") in rows
    assert ("XLMRobertaModel", "embed", "bge-m3", "wde-xlm-roberta") in rows


def test_list_workflows_json(wde):
    data = json.loads(ok(wde("list-workflows", "--json")).stdout)
    assert data["problems"] == []
    embed = {wf["workflow"]: wf for wf in data["workflows"]}["embed"]
    assert embed["provider"] == "wde-core"
    assert embed["stages"] == {**{s: {"component": c, "provider": "wde-core"} for s, c in CORE_STAGES.items()},
                               "attention_backend": {"component": "(auto)", "provider": ""}}
    bert = [link for link in embed["architectures"] if link["provider"] == "wde-bert" and link["task"] == "embed"]
    assert bert == [{"architecture": a, "task": "embed", "variant": "", "model": "wde_bert.model:BertEncoder",
                     "provider": "wde-bert"} for a in BERT_ARCHS]
    assert {"architecture": "BertForTokenClassification", "task": "token_classify", "variant": "",  # same stages
            "model": "wde_bert.model:BertTokenClassifier", "provider": "wde-bert"} in embed["architectures"]


def test_plugins_json_and_table(wde):
    data = json.loads(ok(wde("plugins", "--json")).stdout)
    rows = {row["name"]: row for row in data["plugins"]}
    assert {"wde-core", "wde-bert", "wde-example"} <= set(rows) and data["problems"] == []
    assert (rows["wde-bert"]["distribution"], rows["wde-bert"]["version"]) == ("wde-bert", "0.1.0")
    assert {"wde_get_default_model", "wde_register_architectures", "wde_register_model_sources"} <= set(
        rows["wde-bert"]["hooks"])
    # The core registers its defaults through the same hooks as any plugin.
    assert rows["wde-core"]["hooks"] == [
        "wde_register_attention_backends", "wde_register_engine_args",
        "wde_register_executors", "wde_register_input_processors", "wde_register_model_input_builders",
        "wde_register_output_processors", "wde_register_schedulers", "wde_register_tasks", "wde_register_tokenizers",
        "wde_register_workers", "wde_register_workflows", "wde_select_attention_backend"]
    table = ok(wde("plugins")).stdout.splitlines()
    assert table[0].split() == ["NAME", "DISTRIBUTION", "VERSION", "HOOKS"]
    bert = next(line for line in table if line.startswith("wde-bert "))
    assert bert.split()[:3] == ["wde-bert", "wde-bert", "0.1.0"] and "register_model_sources" in bert


def test_a_plugin_command_is_registered(wde):
    out = ok(wde("example-hello", "--name", "tests")).stdout.splitlines()
    assert out[0] == "hello, tests! wde-example 0.1.0 provides:"
    assert [line.strip() for line in out[1:]] == [
        "architecture ExampleBagOfEmbeddings[embed]", "engine_args example", "input_processor lowercase-text",
        "scheduler shortest-first", "workflow example-lowercase-embed"]


# --- inspect ------------------------------------------------------------------------------------------
def test_inspect_text_shows_settings_and_reasons(wde, tiny_st_bert_dir):
    out = ok(wde("inspect", tiny_st_bert_dir, "--device", "cpu")).stdout
    lines = [" ".join(line.split()) for line in out.splitlines()]
    assert "pooling: mean (1_Pooling/config.json)" in lines
    assert "normalize: True (modules.json (Normalize module))" in lines
    assert "max_model_len: 128 (sentence_bert_config.json)" in lines
    assert "workflow: embed (BertModel is linked to 'embed' for task 'embed' by wde-bert)" in lines
    name, target, reason = auto_cpu_backend()
    assert f"attention_backend {name} {provider_of(target)} {reason}" in lines


def test_inspect_json_on_a_model_without_sentence_transformers_files(wde, tiny_bert_dir):
    info = json.loads(ok(wde("inspect", tiny_bert_dir, "--device", "cpu", "--json")).stdout)
    assert (info["architecture"], info["workflow"], info["model_provider"]) == ("BertModel", "embed", "wde-bert")
    assert (info["pooling"], info["normalize"], info["max_model_len"]) == ("cls", False, 128)
    reasons = info["reasons"]
    assert (reasons["pooling"], reasons["normalize"]) == ("default of wde-bert", "default of wde-bert")
    assert reasons["max_model_len"] == "config.json max_position_embeddings"
    name, target, reason = auto_cpu_backend()
    assert info["stages"]["attention_backend"] == {"component": name, "provider": provider_of(target), "target": target}
    assert reasons["attention_backend"] == reason
    eager = json.loads(ok(wde("inspect", tiny_bert_dir, "--device", "cpu", "--attention-backend", "eager",
                              "--json")).stdout)
    assert eager["reasons"]["attention_backend"] == "engine argument attention_backend"


def test_inspect_takes_any_engine_argument(wde, tiny_bert_dir):
    info = json.loads(ok(wde("inspect", tiny_bert_dir, "--json", "--engine-arg", "max_model_len=32",
                             "--engine-arg", "pooling=max")).stdout)
    assert (info["max_model_len"], info["pooling"]) == (32, "max")
    bad = wde("inspect", tiny_bert_dir, "--engine-arg", "no_such_arg=1")
    assert bad.exit_code == 1 and "unknown engine argument(s) no_such_arg" in bad.output
    assert "expected KEY=VALUE" in wde("inspect", tiny_bert_dir, "--engine-arg", "oops").output


def test_inspect_without_a_model_uses_the_packaged_default(wde, monkeypatch):
    """wde-bert's wde_get_default_model names MiniLM; its wde_register_model_sources finds the copy."""
    monkeypatch.delenv("WDE_DEFAULT_MODEL", raising=False)
    info = json.loads(ok(wde("inspect", "--device", "cpu", "--json")).stdout)
    assert info["model"] == "sentence-transformers/all-MiniLM-L6-v2"
    assert Path(info["path"]) == minilm_path()
    assert info["found_by"] == "local copy registered by wde-bert"
    assert info["reasons"]["model"] == "no model given; the default model from the installed plugins"
    assert (info["pooling"], info["normalize"], info["max_model_len"]) == ("mean", True, 256)


# --- encode -------------------------------------------------------------------------------------------
def test_encode_texts_given_as_arguments(wde, tiny_st_bert_dir, st_engine):
    vectors, ids = embeddings_of(ok(wde("encode", "-m", tiny_st_bert_dir, "--device", "cpu", *TEXTS)).stdout)
    assert ids == [None] * 3
    np.testing.assert_allclose(vectors, st_engine.encode(TEXTS), atol=1e-6)
    out = ok(wde("encode", "-m", tiny_st_bert_dir, "--device", "cpu", "--no-normalize", "--dimensions", "16",
                 *TEXTS)).stdout
    np.testing.assert_allclose(embeddings_of(out)[0], st_engine.encode(TEXTS, normalize=False, dimensions=16),
                               atol=1e-6)


def test_encode_engine_options_reach_the_engine(wde, tiny_st_bert_dir):
    out = ok(wde("encode", "-m", tiny_st_bert_dir, "--device", "cpu", "--pooling", "cls", "--max-model-len", "8",
                 "--num-threads", str(torch.get_num_threads()), "--executor", "pipelined", *TEXTS)).stdout
    expected = Engine(str(tiny_st_bert_dir), device="cpu", pooling="cls", max_model_len=8).encode(TEXTS)
    np.testing.assert_allclose(embeddings_of(out)[0], expected, atol=1e-6)
    assert np.abs(expected - Engine(str(tiny_st_bert_dir), device="cpu").encode(TEXTS)).max() > 1e-3


def test_encode_txt_input_to_npy(wde, tmp_path, tiny_st_bert_dir, st_engine):
    (tmp_path / "in.txt").write_text("\n".join(TEXTS) + "\n\n", encoding="utf-8")
    ok(wde("encode", "-m", tiny_st_bert_dir, "--device", "cpu", "-i", tmp_path / "in.txt", "-o", tmp_path / "out.npy"))
    saved = np.load(tmp_path / "out.npy")
    assert saved.shape == (3, 64) and saved.dtype == np.float32
    np.testing.assert_allclose(saved, st_engine.encode(TEXTS), atol=1e-6)


def test_encode_jsonl_input_carries_ids_to_jsonl_output(wde, tmp_path, tiny_st_bert_dir, st_engine):
    lines = [json.dumps({"id": f"doc-{i}", "text": t}) for i, t in enumerate(TEXTS)]
    (tmp_path / "in.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    ok(wde("encode", "-m", tiny_st_bert_dir, "--device", "cpu", "--input", tmp_path / "in.jsonl",
           "--output", tmp_path / "out.jsonl"))
    vectors, ids = embeddings_of((tmp_path / "out.jsonl").read_text(encoding="utf-8"))
    assert ids == ["doc-0", "doc-1", "doc-2"]
    np.testing.assert_allclose(vectors, st_engine.encode(TEXTS), atol=1e-6)


def test_encode_reads_stdin(wde, tiny_st_bert_dir, st_engine):
    out = ok(wde("encode", "-m", tiny_st_bert_dir, "--device", "cpu", stdin="\n".join(TEXTS) + "\n")).stdout
    np.testing.assert_allclose(embeddings_of(out)[0], st_engine.encode(TEXTS), atol=1e-6)


# --- bad inputs ---------------------------------------------------------------------------------------
def test_a_jsonl_line_without_text_is_named(wde, tmp_path, tiny_st_bert_dir):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"id": 1, "text": "fine"}) + "\n" + json.dumps({"id": 2, "body": "no text"}) + "\n")
    err = clean_error(wde("encode", "-m", tiny_st_bert_dir, "-i", path))
    assert err == f"Error: {path} line 2: field 'text' must be a string\n"


def test_no_truncate_names_the_over_long_input(wde, tiny_st_bert_dir):
    err = clean_error(wde("encode", "-m", tiny_st_bert_dir, "--device", "cpu", "--no-truncate", "short", "word " * 200))
    assert "Error: input 1: field 'text' has 202 tokens, more than max_model_len=128" in err


def test_an_unknown_model_is_a_clean_error(wde, tmp_path):
    missing = tmp_path / "no-such-model"
    err = clean_error(wde("encode", "-m", missing, "hello"))
    assert f"Error: model '{missing}' is neither a directory nor a valid hub id" in err
    assert "neither a directory nor a valid hub id" in clean_error(wde("inspect", missing))
    # The installed ``wde`` script, end to end: the same message, no traceback.
    script = Path(sys.executable).with_name("wde")
    proc = subprocess.run([str(script), "encode", "-m", str(missing), "hello"], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 1 and proc.stdout == ""
    assert f"Error: model '{missing}' is neither a directory" in proc.stderr and "Traceback" not in proc.stderr
