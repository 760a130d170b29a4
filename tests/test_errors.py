"""Bad input and bad weights: each a clear error, raised before any work, naming what is wrong."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from conftest import save_random_bert
from wde_core import Engine
from wde_core.stages.weights import WeightsError


@pytest.fixture(scope="module")
def engine(tiny_st_bert_dir):
    return Engine(str(tiny_st_bert_dir))


def test_empty_list_is_refused(engine):
    with pytest.raises(ValueError, match="empty list"):
        engine.encode([])


def test_non_string_items_name_the_index_and_field(engine):
    with pytest.raises(TypeError, match=r"input 2: field 'text' must be a str, got int"):
        engine.encode(["a", "b", 3])
    with pytest.raises(TypeError, match="expected a str or a list of str"):
        engine.encode(42)


def test_over_long_input_without_truncation_names_it(engine):
    long_text = "word " * 300
    with pytest.raises(ValueError, match=r"input 1: field 'text' has 302 tokens, more than max_model_len=128"):
        engine.encode(["short", long_text], truncate=False)
    assert engine.encode(["short", long_text]).shape == (2, 64)  # truncation is the default


def test_bad_options_are_refused(engine):
    with pytest.raises(ValueError, match="dimensions=0"):
        engine.encode("x", dimensions=0)
    with pytest.raises(ValueError, match="exceeds the model's embedding size 64"):
        engine.encode("x", dimensions=65)
    with pytest.raises(ValueError, match="prompt_name='query' is not among the model's prompts"):
        engine.encode("x", prompt_name="query")
    with pytest.raises(ValueError, match="either prompt or prompt_name"):
        engine.encode("x", prompt="a", prompt_name="b")


def test_engine_keeps_serving_after_a_refused_request(engine):
    before = engine.encode(["still here"])
    with pytest.raises(TypeError):
        engine.encode(["fine", None])
    assert np.array_equal(engine.encode(["still here"]), before)
    assert not engine.scheduler.has_waiting()


def test_unknown_engine_argument_is_named(tiny_bert_dir):
    with pytest.raises(TypeError, match=r"unknown engine argument\(s\) max_batch; accepted by workflow 'embed'"):
        Engine(str(tiny_bert_dir), max_batch=4)
    with pytest.raises(ValueError, match="dtype='float8'"):
        Engine(str(tiny_bert_dir), dtype="float8")
    with pytest.raises(ValueError, match="max_model_len=500 exceeds the model's 128 positions"):
        Engine(str(tiny_bert_dir), max_model_len=500)


def test_unknown_attention_backend_lists_the_registered_ones(tiny_bert_dir):
    with pytest.raises(LookupError, match="no attention backend 'xformers'.*registered: cpu_varlen, eager, flash_attn, torch_sdpa"):
        Engine(str(tiny_bert_dir), attention_backend="xformers")


def copy_model(src, dst):
    shutil.copytree(src, dst)
    return dst


def edit_weights(directory, edit):
    path = directory / "model.safetensors"
    weights = load_file(path)
    edit(weights)
    save_file(weights, path, metadata={"format": "pt"})


def test_missing_weights_are_named(tiny_bert_dir, tmp_path):
    directory = copy_model(tiny_bert_dir, tmp_path / "m")
    edit_weights(directory, lambda w: w.pop("encoder.layer.1.attention.self.key.weight"))
    with pytest.raises(WeightsError, match=r"weights missing from the checkpoint.*layers\.1\.qkv\.weight"):
        Engine(str(directory))


def test_unexpected_weights_are_named(tiny_bert_dir, tmp_path):
    directory = copy_model(tiny_bert_dir, tmp_path / "m")
    edit_weights(directory, lambda w: w.update({"encoder.layer.9.output.dense.weight": torch.zeros(2, 2)}))
    with pytest.raises(WeightsError, match=r"unexpected weights in the checkpoint.*encoder\.layer\.9\.output"):
        Engine(str(directory))


def test_mismatched_weights_are_named(tiny_bert_dir, tmp_path):
    directory = copy_model(tiny_bert_dir, tmp_path / "m")
    edit_weights(directory, lambda w: w.update({"embeddings.LayerNorm.weight": torch.ones(65)}))
    with pytest.raises(WeightsError, match=r"'embeddings.LayerNorm.weight' has shape \[65\].*expects \[64\]"):
        Engine(str(directory))


def test_corrupted_safetensors_is_reported(tiny_bert_dir, tmp_path):
    directory = copy_model(tiny_bert_dir, tmp_path / "m")
    path = directory / "model.safetensors"
    path.write_bytes(path.read_bytes()[:1000])
    with pytest.raises(WeightsError, match="corrupted safetensors file .*model.safetensors"):
        Engine(str(directory))


def test_missing_weight_files_are_reported(tiny_bert_dir, tmp_path):
    directory = copy_model(tiny_bert_dir, tmp_path / "m")
    (directory / "model.safetensors").unlink()
    with pytest.raises(WeightsError, match="no weights found"):
        Engine(str(directory))


def test_unsupported_sentence_transformers_module_is_refused(tiny_st_bert_dir, tmp_path):
    directory = copy_model(tiny_st_bert_dir, tmp_path / "m")
    modules = json.loads((directory / "modules.json").read_text())
    lstm = {"idx": 3, "name": "3", "path": "3_LSTM", "type": "sentence_transformers.models.LSTM"}
    (directory / "modules.json").write_text(json.dumps(modules + [lstm]))
    with pytest.raises(ValueError, match="unsupported sentence-transformers modules: sentence_transformers.models.LSTM"):
        Engine(str(directory))
    dense = {"idx": 3, "name": "3", "path": "3_Dense", "type": "sentence_transformers.models.Dense"}
    (directory / "modules.json").write_text(json.dumps(modules + [dense]))
    with pytest.raises(ValueError, match=r"modules: Dense \(3_Dense: no config.json with in_features and out_features"):
        Engine(str(directory))


@pytest.mark.parametrize("layout", ["sharded-safetensors", "pytorch-bin", "sharded-bin"])
def test_other_checkpoint_layouts_load_the_same_weights(tmp_path, layout):
    from transformers import BertModel

    reference_dir = save_random_bert(tmp_path / "ref", seed=5)
    other_dir = save_random_bert(tmp_path / "other", seed=5)
    for f in other_dir.glob("*.safetensors"):
        f.unlink()
    model = BertModel.from_pretrained(reference_dir)
    safe = layout == "sharded-safetensors"
    shard = "200KB" if layout.startswith("sharded") else "10GB"
    if safe:
        model.save_pretrained(other_dir, max_shard_size=shard)
        assert len(list(other_dir.glob("model-*.safetensors"))) > 1
        assert (other_dir / "model.safetensors.index.json").is_file()
    else:
        save_bin(model.state_dict(), other_dir, sharded=layout == "sharded-bin")
    texts = ["one checkpoint", "another layout, the same numbers"]
    expected = Engine(str(reference_dir)).encode(texts)
    assert np.array_equal(Engine(str(other_dir)).encode(texts), expected)


def save_bin(state: dict, directory, sharded: bool) -> None:
    """Write ``pytorch_model.bin`` or two shards with ``pytorch_model.bin.index.json``."""
    if not sharded:
        torch.save(state, directory / "pytorch_model.bin")
        return
    names = sorted(state)
    halves = {"pytorch_model-00001-of-00002.bin": names[::2], "pytorch_model-00002-of-00002.bin": names[1::2]}
    weight_map = {}
    for file, keys in halves.items():
        torch.save({k: state[k] for k in keys}, directory / file)
        weight_map.update({k: file for k in keys})
    (directory / "pytorch_model.bin.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))


def test_token_budget_defaults_per_device_and_must_fit_a_full_input(tiny_bert_dir):
    from wde_core import assemble_pipeline

    pipeline = assemble_pipeline(str(tiny_bert_dir), device="cpu")
    assert pipeline.args.max_num_batched_tokens == 4096
    assert pipeline.reasons["max_num_batched_tokens"] == "default for cpu"
    with pytest.raises(ValueError, match="max_num_batched_tokens=64 is below max_model_len=128"):
        assemble_pipeline(str(tiny_bert_dir), device="cpu", max_num_batched_tokens=64)
