"""Decoder settings: the causal/bidirectional decision and its reasons (engine argument > config.json
field > known-model rule > causal), ``wde inspect``, the sliding-window cap, RoPE variants, and the
plugin's registrations."""

from __future__ import annotations

import json
import shutil

import pytest
from click.testing import CliRunner

from decoder_fixtures import hf_states, load_reference, random_token_lists, save_random_decoder, wde_states
from wde_core import Engine, assemble_pipeline
from wde_core.cli.main import cli

ARCHITECTURES = ["LlamaForCausalLM", "LlamaModel", "MistralForCausalLM", "MistralModel", "Qwen2ForCausalLM",
                 "Qwen2Model"]


@pytest.fixture(scope="module")
def base_dir(tmp_path_factory):
    """A one-layer random Qwen2 directory to copy and edit."""
    return save_random_decoder(tmp_path_factory.mktemp("qwen2-base"), "qwen2", num_hidden_layers=1)


def copy_model(base_dir, tmp_path, name="model", **config_fields):
    """A copy of the base model under ``name``, with ``config_fields`` written into its config.json."""
    directory = tmp_path / name
    shutil.copytree(base_dir, directory)
    config = json.loads((directory / "config.json").read_text())
    (directory / "config.json").write_text(json.dumps({**config, **config_fields}))
    return directory


def causal_and_reason(directory, **engine_args):
    """``(settings.causal, reasons["causal"])`` of the assembled pipeline."""
    pipeline = assemble_pipeline(str(directory), device="cpu", **engine_args)
    return pipeline.settings.causal, pipeline.reasons["causal"]


@pytest.mark.parametrize("config_fields, name, engine_arg, causal, why", [
    ({}, "model", None, True, "decoders default to causal"),
    ({"is_causal": False}, "model", None, False, "config.json is_causal=false"),
    ({"is_causal": True}, "model", None, True, "config.json is_causal=true"),
    ({"bidirectional": True}, "model", None, False, "config.json bidirectional=true"),
    ({"use_bidirectional_attention": True}, "model", None, False, "config.json use_bidirectional_attention=true"),
    ({}, "gte-Qwen2-7B-instruct", None, False, "known model ('gte-qwen2-7b-instruct'"),
    ({}, "gte-Qwen2-1.5B-instruct", None, False, "known model ('gte-qwen2-1.5b-instruct'"),
    ({"_name_or_path": "Alibaba-NLP/gte-Qwen2-7B-instruct"}, "model", None, False, "known model"),
    ({"is_causal": True}, "gte-Qwen2-7B-instruct", None, True, "config.json is_causal=true"),  # config > rule
    ({"is_causal": False}, "model", False, True, "engine argument enable_bidirectional=False"),  # argument > config
    ({}, "gte-Qwen2-7B-instruct", False, True, "engine argument enable_bidirectional=False"),  # argument > rule
    ({"is_causal": True}, "model", True, False, "engine argument enable_bidirectional=True"),
])
def test_causal_decision_and_its_reason(base_dir, tmp_path, config_fields, name, engine_arg, causal, why):
    directory = copy_model(base_dir, tmp_path, name, **config_fields)
    decided, reason = causal_and_reason(directory, enable_bidirectional=engine_arg)
    assert decided is causal
    assert reason.startswith("causal attention: " if causal else "bidirectional attention: ")
    assert why in reason


def test_config_is_causal_false_matches_hf_as_is(base_dir, tmp_path):
    """transformers >= 5 reads ``is_causal: false`` too: wde and the unmodified HF model agree."""
    directory = copy_model(base_dir, tmp_path, is_causal=False)
    reference = load_reference(directory)
    engine = Engine(str(directory), device="cpu")
    ids = random_token_lists([21], seed=5)[0]
    as_is = hf_states(reference, ids, bidirectional=False)  # no mask: HF follows the config
    assert (as_is - hf_states(reference, ids, bidirectional=True)).abs().max().item() <= 1e-5
    assert (wde_states(engine, [ids])[0] - as_is).abs().max().item() <= 1e-4


def test_bad_values_are_refused(base_dir, tmp_path, tiny_bert_dir):
    with pytest.raises(ValueError, match="enable_bidirectional='yes': expected True, False or None"):
        assemble_pipeline(str(base_dir), enable_bidirectional="yes")
    with pytest.raises(ValueError, match="config.json is_causal='false' is not a boolean"):
        assemble_pipeline(str(copy_model(base_dir, tmp_path, is_causal="false")))
    with pytest.raises(TypeError, match="unknown engine argument.*enable_bidirectional"):
        assemble_pipeline(str(tiny_bert_dir), enable_bidirectional=True)  # not an argument of BERT's workflow


def test_inspect_shows_the_choice_and_why(isolated_host, base_dir, tmp_path):
    isolated_host.register_commands(cli)
    directory = copy_model(base_dir, tmp_path, "gte-Qwen2-7B-instruct")
    result = CliRunner().invoke(cli, ["inspect", str(directory), "--device", "cpu", "--json"])
    assert result.exit_code == 0, result.output
    info = json.loads(result.stdout)
    assert (info["workflow"], info["model_class"]) == ("decoder-embed", "wde_qwen2_bidir.model:DecoderEmbedder")
    assert info["causal"] is False and "known model" in info["reasons"]["causal"]
    assert (info["pooling"], info["normalize"]) == ("last", True)
    table = CliRunner().invoke(cli, ["inspect", str(directory), "--device", "cpu"]).stdout
    assert any(line.split()[:2] == ["causal:", "False"] and "gte-Qwen2-7B-instruct was trained" in line
               for line in table.splitlines())
    forced = CliRunner().invoke(cli, ["inspect", str(directory), "--device", "cpu", "--json",
                                      "--engine-arg", "enable_bidirectional=false", "--engine-arg", "pooling=mean"])
    info = json.loads(forced.stdout)
    assert info["causal"] is True and "engine argument enable_bidirectional=False" in info["reasons"]["causal"]
    assert info["pooling"] == "mean"


def test_sliding_window_caps_the_length(tmp_path):
    directory = save_random_decoder(tmp_path / "mistral", "mistral", num_hidden_layers=1, sliding_window=16)
    pipeline = assemble_pipeline(str(directory), device="cpu")
    assert pipeline.settings.max_model_len == 16
    assert "capped at the model's sliding window of 16 tokens" in pipeline.reasons["max_model_len"]
    assert assemble_pipeline(str(directory), max_model_len=8).settings.max_model_len == 8
    with pytest.raises(ValueError, match="max_model_len=32 exceeds the model's sliding window of 16"):
        assemble_pipeline(str(directory), max_model_len=32)
    reference, engine = load_reference(directory), Engine(str(directory), device="cpu")
    ids = random_token_lists([16], seed=6)[0]  # a full window: HF's sliding window changes nothing yet
    assert (wde_states(engine, [ids])[0] - hf_states(reference, ids, bidirectional=False)).abs().max() <= 1e-4


def test_qwen2_sliding_window_off_means_no_cap(base_dir):
    assert assemble_pipeline(str(base_dir), device="cpu").settings.max_model_len == 64


@pytest.mark.parametrize("family, rope", [
    ("qwen2", {"rope_type": "yarn", "rope_theta": 1e4, "factor": 4.0, "original_max_position_embeddings": 16}),
    ("llama", {"rope_type": "linear", "rope_theta": 1e4, "factor": 2.0}),
])
def test_scaled_rope_matches_hf(tmp_path, family, rope):
    directory = save_random_decoder(tmp_path / family, family, num_hidden_layers=1, rope_parameters=rope)
    reference, engine = load_reference(directory), Engine(str(directory), device="cpu")
    ids = random_token_lists([64], seed=7)[0]
    assert (wde_states(engine, [ids])[0] - hf_states(reference, ids, bidirectional=False)).abs().max() <= 1e-4


def test_unsupported_rope_is_refused_at_assembly(tmp_path):
    directory = save_random_decoder(tmp_path / "llama", "llama", num_hidden_layers=1,
                                    rope_parameters={"rope_type": "dynamic", "rope_theta": 1e4, "factor": 2.0})
    with pytest.raises(ValueError, match="RoPE .*'dynamic'.* is not supported by wde"):
        assemble_pipeline(str(directory))


def test_the_plugin_registers_workflow_arguments_and_links(isolated_host):
    registry = isolated_host.registry
    ours = [p for p in isolated_host.problems + registry.check_imports() if p.plugin == "wde-qwen2-bidir"]
    assert ours == []
    assert isolated_host.plugins["wde-qwen2-bidir"].distribution == "wde-qwen2-bidir"
    for architecture in ARCHITECTURES:
        link = registry.links[(architecture, "embed", "")]
        assert (link.workflow, link.model, link.provider) == (
            "decoder-embed", "wde_qwen2_bidir.model:DecoderEmbedder", "wde-qwen2-bidir")
        assert link.configure == "wde_qwen2_bidir.attention_mode:configure"
        assert dict(link.defaults) == {"pooling": "last", "normalize": True, "causal": True}
    workflow = registry.workflows["decoder-embed"]
    assert (workflow.tokenizer, workflow.engine_args) == ("hf-fast-eos", "decoder")
