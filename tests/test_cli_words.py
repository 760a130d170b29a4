"""The command line's vocabulary and hints (issue 15): errors in CLI words, one meaning per short option,
``--engine-arg`` everywhere, ``list-workflows --check``'s closing line, install hints for the commands of
missing plugins, ``wde rerank`` with QUERY first and without a model."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import click
import numpy as np
import pytest
from click.testing import CliRunner

from conftest import save_bert_classifier
from wde_core import Engine
from wde_core.cli import hints as cli_hints
from wde_core.cli.main import WdeGroup, cli

TEXTS = ["The cat sat on the mat.", "Embeddings map text to vectors", "short"]
QUERY, DOCS = "Which animal jumps?", ["The quick brown fox jumps over the dog.", "Markets fell.", "A fox."]
WDE = str(Path(sys.executable).with_name("wde"))


@pytest.fixture
def wde(isolated_host):
    isolated_host.register_commands(cli)
    return lambda *args, stdin=None: CliRunner().invoke(cli, [str(a) for a in args], input=stdin)


@pytest.fixture(scope="module")
def cross_encoder(tmp_path_factory) -> Path:
    return save_bert_classifier(tmp_path_factory.mktemp("bert-ce"), seed=1)


def error_line(result, exit_code: int = 1) -> str:
    assert result.exit_code == exit_code, result.output
    assert isinstance(result.exception, SystemExit) and "Traceback" not in result.output
    return result.stderr.strip().splitlines()[-1]


def printed(result):
    assert result.exit_code == 0, (result.output, result.exception)
    return result.stdout


# --- one vocabulary ----------------------------------------------------------------------------------
def test_errors_name_options_not_keyword_arguments(wde, tiny_st_bert_dir):
    line = error_line(wde("encode", "-m", tiny_st_bert_dir, "--device", "cpu", "--no-truncate", "a", "word " * 200))
    assert line == ("Error: input 1: field 'text' has 202 tokens, more than max_model_len=128; shorten it or pass "
                    "--truncate")


def test_rerank_on_an_embedder_names_the_command_and_the_api_keeps_its_words(wde, tiny_st_bert_dir):
    line = error_line(wde("rerank", "-m", tiny_st_bert_dir, "--device", "cpu", QUERY, *DOCS))
    assert line == (f"Error: wde rerank serves the 'rerank' task, but model '{tiny_st_bert_dir}' is served for the "
                    "'embed' task; use wde encode")
    # installed plugins' tasks serve embed models too (wde-clip's similarity, wde-late-interaction's multi_vector_*)
    methods = r"use encode\(\)(, | and )embed_tokens\(\)(, \w+\(\))*( and \w+\(\))?$"
    with pytest.raises(TypeError, match=r"^rerank\(\) serves .* " + methods):
        Engine(str(tiny_st_bert_dir), device="cpu").rerank(QUERY, DOCS)


def test_api_words_without_a_command_stay_python():
    words = cli_hints.cli_words("classify() serves the 'classify' task; use classify()", "rerank", {"rerank"})
    assert words == "wde rerank serves the 'classify' task; use the Python API's classify()"
    assert cli_hints.cli_words("output='sparse': needs truncate=False", None, {}) == (
        "--output-type 'sparse': needs --no-truncate")


def test_a_method_served_by_a_command_of_another_name_names_the_command():
    words = cli_hints.cli_words("encode() serves the 'embed' task; use classify_tokens()", "encode",
                                {"encode", "classify-tokens"})
    assert words == "wde encode serves the 'embed' task; use wde classify-tokens"


def test_each_short_option_means_one_thing_in_every_command(isolated_host):
    group = WdeGroup("wde", commands=dict(cli.commands))  # the core's own, defined on the wde group
    isolated_host.register_commands(group)
    meanings: dict[str, set[str]] = {}
    commands = list(group.commands.values())
    for command in commands:
        commands += getattr(command, "commands", {}).values()  # groups such as ``wde plugin``
        for param in command.params:
            for short in [o for o in param.opts if len(o) == 2 and isinstance(param, click.Option)]:
                meanings.setdefault(short, set()).add(next(o for o in param.opts if o.startswith("--")))
    assert {"encode", "rerank", "inspect"} <= set(group.commands)
    assert {short: longs for short, longs in meanings.items() if len(longs) > 1} == {}
    assert meanings["-q"] == {"--quiet"} and meanings["-m"] == {"--model"} and meanings["-i"] == {"--input"}


def test_encode_and_rerank_take_engine_args(wde, tiny_st_bert_dir, cross_encoder):
    out = printed(wde("encode", "-m", tiny_st_bert_dir, "--device", "cpu", "--engine-arg", "max_model_len=4",
                      *TEXTS))
    short = Engine(str(tiny_st_bert_dir), device="cpu", max_model_len=4).encode(TEXTS)
    np.testing.assert_allclose([json.loads(line)["embedding"] for line in out.splitlines()], short, atol=1e-6)
    assert np.abs(short - Engine(str(tiny_st_bert_dir), device="cpu").encode(TEXTS)).max() > 1e-3  # it applied
    ranked = json.loads(printed(wde("rerank", "-m", cross_encoder, "--device", "cpu", "--engine-arg",
                                    "max_model_len=12", QUERY, *DOCS)))
    expected = Engine(str(cross_encoder), device="cpu", max_model_len=12).rerank(QUERY, DOCS)
    assert [r["index"] for r in ranked] == [r["index"] for r in expected]
    assert [r["score"] for r in ranked] == pytest.approx([r["score"] for r in expected], abs=1e-6)
    assert "--engine-arg: 'oops': expected KEY=VALUE" in error_line(
        wde("rerank", "-m", cross_encoder, "--engine-arg", "oops", QUERY, "a"), exit_code=2)


def test_rerank_takes_the_query_first_or_as_query(wde, cross_encoder):
    first = json.loads(printed(wde("rerank", "-m", cross_encoder, "--device", "cpu", QUERY, *DOCS)))
    named = json.loads(printed(wde("rerank", "-m", cross_encoder, "--device", "cpu", "--query", QUERY, *DOCS)))
    expected = Engine(str(cross_encoder), device="cpu").rerank(QUERY, DOCS)
    assert first == named and [r["index"] for r in first] == [r["index"] for r in expected]
    assert error_line(wde("rerank", "-m", cross_encoder), exit_code=2) == (
        "Error: give a query: wde rerank QUERY [DOCUMENTS]... (or --query QUERY)")


def test_rerank_without_a_model_says_how_to_name_one(wde, monkeypatch):
    monkeypatch.delenv("WDE_DEFAULT_MODEL", raising=False)
    assert error_line(wde("rerank", "what is a panda?", "a bear", "a city")) == (
        "Error: wde rerank needs a cross-encoder model, and no installed plugin ships one: name one with -m, e.g. "
        "wde rerank -m cross-encoder/ms-marco-MiniLM-L-6-v2 QUERY DOCUMENT... (a model directory, or a hub id in "
        "the local Hugging Face cache), or set WDE_DEFAULT_MODEL")


def test_list_workflows_check_ends_with_what_it_checked(wde, isolated_host):
    reg = isolated_host.registry
    last = printed(wde("list-workflows", "--check")).splitlines()[-1]
    components = sum(len(stage) for stage in reg.components.values())
    assert last == (f"checked {len(reg.workflows)} workflows, {components} components, {len(reg.links)} "
                    f"architecture links, {len(reg.model_sources)} model sources and {len(reg.tasks)} tasks: "
                    "all imports resolve")
    assert len(reg.workflows) >= 1 and components >= 9 and len(reg.tasks) >= 2


def test_async_engine_is_exported_from_the_package():
    code = "from wde_core import AsyncEngine; import wde_core.runtime.async_engine as m; print(AsyncEngine is m.AsyncEngine)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120).stdout == "True\n"
    readme = (Path(__file__).parents[1] / "README.md").read_text(encoding="utf-8")
    assert "from wde_core import AsyncEngine" in readme and "from wde_core.runtime.async_engine import" not in readme


# --- plugins the user does not have yet ---------------------------------------------------------------
@pytest.mark.parametrize("command, dist", [("rerank", "wde-batch"), ("encode", "wde-batch"), ("serve", "wde-server"),
                                           ("plugin", "wde-plugin-kit")])
def test_a_missing_plugins_command_says_how_to_install_it(register_plugin, tmp_path, monkeypatch, command, dist):
    register_plugin(use_entry_points=False)  # only the core: no plugin installed
    group = WdeGroup("wde")
    from wde_core.plugins.host import get_plugin_host

    get_plugin_host().register_commands(group)
    monkeypatch.setattr(cli_hints, "CHECKOUT", tmp_path / "site-packages")  # an installed wde: no plugins/ beside
    said = f"Error: wde {command} is provided by the {dist} plugin"
    assert error_line(CliRunner().invoke(group, [command, "x"])) == f"{said}: pip install {dist}"
    (tmp_path / "plugins" / dist).mkdir(parents=True)
    (tmp_path / "plugins" / dist / "pyproject.toml").write_text("[project]\n")
    monkeypatch.setattr(cli_hints, "CHECKOUT", tmp_path)  # a source checkout
    monkeypatch.chdir(tmp_path)
    assert error_line(CliRunner().invoke(group, [command, "x"])) == (
        f"{said}: pip install {dist} (from this checkout: pip install ./plugins/{dist})")
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")  # outside the checkout: its absolute path
    assert error_line(CliRunner().invoke(group, [command])) == (
        f"{said}: pip install {dist} (from this checkout: pip install {tmp_path / 'plugins' / dist})")
    assert error_line(CliRunner().invoke(group, ["no-such-command"]), exit_code=2) == (
        "Error: No such command 'no-such-command'.")


def test_a_command_left_out_by_wde_plugins_says_so():
    env = {**os.environ, "WDE_PLUGINS": "wde-bert"}
    proc = subprocess.run([WDE, "rerank", "query", "doc"], capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.strip().splitlines()[-1] == (
        "Error: wde rerank is provided by the wde-batch plugin, installed but left out by "
        "WDE_PLUGINS='wde-bert': add its entry point to WDE_PLUGINS")


def test_other_install_hints_get_the_checkout_path(tmp_path, monkeypatch):
    (tmp_path / "plugins" / "wde-bert").mkdir(parents=True)
    (tmp_path / "plugins" / "wde-bert" / "pyproject.toml").write_text("[project]\n")
    monkeypatch.setattr(cli_hints, "CHECKOUT", tmp_path)
    monkeypatch.chdir(tmp_path)
    message = "no model given (pip install 'wde-bert[default-model]' provides all-MiniLM-L6-v2)"
    assert cli_hints.cli_words(message, "encode", {"encode"}) == (
        "no model given (pip install 'wde-bert[default-model]' (from this checkout: pip install "
        "'./plugins/wde-bert[default-model]') provides all-MiniLM-L6-v2)")
