"""Configs with absurd sizes are refused before any weight is allocated, with a ValueError naming the
directory, the config field and its value, and why (issue 23, finding 9)."""

from __future__ import annotations

import json
import re
import resource
import shutil
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import load_file

from conftest import save_random_bert
from wde_core import Engine
from wde_core.assembly.model_files import check_config_sizes
from wde_core.assembly.pipeline import assemble_pipeline
from wde_core.stages.weights import WeightsError


@pytest.fixture(scope="module")
def bert_384(tmp_path_factory) -> Path:
    """A random-weight BERT with hidden size 384 and 6 heads (the head count does not shape any weight)."""
    return save_random_bert(tmp_path_factory.mktemp("bert-384"), hidden_size=384, num_attention_heads=6,
                            intermediate_size=512)


def edited(source: Path, tmp_path: Path, **fields) -> Path:
    """A copy of ``source`` whose config.json has ``fields`` (``None``: the field removed)."""
    target = tmp_path / "edited"
    shutil.copytree(source, target)
    config = json.loads((target / "config.json").read_text())
    config.update(fields)
    (target / "config.json").write_text(json.dumps({k: v for k, v in config.items() if v is not None}))
    return target


def refused_quickly(path: Path, match: str, error=ValueError):
    """Build an Engine for ``path``: it must raise ``error`` matching ``match`` within seconds, allocating little."""
    peak, start = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, time.perf_counter()
    with pytest.raises(error, match=match) as caught:
        Engine(str(path))
    assert time.perf_counter() - start < 10
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak < 300_000  # KiB: no model was allocated
    assert str(path) in str(caught.value)  # names the directory
    return caught.value


def test_the_unedited_directories_still_load(tiny_bert_dir, bert_384):
    assert Engine(str(tiny_bert_dir)).encode(["a short text"]).shape == (1, 64)
    assert Engine(str(bert_384)).encode(["a short text"]).shape == (1, 384)


def test_a_million_layers_are_refused_before_loading(tiny_bert_dir, tmp_path):
    path = edited(tiny_bert_dir, tmp_path, num_hidden_layers=1_000_000)
    error = refused_quickly(path, "num_hidden_layers=1000000")
    message = str(error)
    assert "the config does not match the weights" in message
    held = float(re.search(r"the weight files hold ([\d.,]+) MB", message).group(1))
    assert held == pytest.approx((path / "model.safetensors").stat().st_size / 1e6, abs=0.1)
    assert float(re.search(r"imply ~([\d.e+]+) parameters", message).group(1)) > 1e10


@pytest.mark.parametrize("field, value", [("vocab_size", 10**9), ("hidden_size", 10**6), ("intermediate_size", 10**8)])
def test_a_huge_vocabulary_or_width_is_refused(tiny_bert_dir, tmp_path, field, value):
    refused_quickly(edited(tiny_bert_dir, tmp_path, **{field: value}), f"{field}={value}.*does not match the weights")


def test_pytorch_bin_checkpoints_are_measured_too(tiny_bert_dir, tmp_path):
    path = edited(tiny_bert_dir, tmp_path, num_hidden_layers=1_000_000)
    torch.save(load_file(str(path / "model.safetensors")), path / "pytorch_model.bin")
    (path / "model.safetensors").unlink()
    refused_quickly(path, "num_hidden_layers=1000000.*does not match the weights")


def test_seven_heads_for_hidden_384_are_refused_before_loading(bert_384, tmp_path):
    path = edited(bert_384, tmp_path, num_attention_heads=7)
    refused_quickly(path, "hidden_size=384 is not a multiple of num_attention_heads=7 and no head_dim is given")


@pytest.mark.parametrize("field, value", [("num_hidden_layers", -2), ("num_hidden_layers", 0), ("hidden_size", -64),
                                          ("vocab_size", 0), ("intermediate_size", -1), ("num_attention_heads", 0),
                                          ("max_position_embeddings", -512)])
def test_non_positive_sizes_are_refused(tiny_bert_dir, tmp_path, field, value):
    path = edited(tiny_bert_dir, tmp_path, **{field: value})
    refused_quickly(path, rf"{field}={value}: a size must be a positive integer")


@pytest.mark.parametrize("field, value", [("num_hidden_layers", 2.5), ("hidden_size", "64"),
                                          ("num_hidden_layers", True)])
def test_non_integer_sizes_are_refused(tiny_bert_dir, tmp_path, field, value):
    # transformers' strict config fields may refuse them first ("cannot read"); else the core's check does
    refused_quickly(edited(tiny_bert_dir, tmp_path, **{field: value}), rf"{field}\b.*{re.escape(repr(value))}|"
                    rf"cannot read .*{field}")


def test_a_bare_config_assembles_but_the_engine_refuses_before_allocating(tiny_bert_dir, tmp_path):
    path = tmp_path / "bare"
    path.mkdir()
    config = json.loads((tiny_bert_dir / "config.json").read_text())
    (path / "config.json").write_text(json.dumps({**config, "num_hidden_layers": 1_000_000}))
    assert assemble_pipeline(str(path)).model.config.num_hidden_layers == 1_000_000  # wde inspect: no weights read
    refused_quickly(path, "no weights found", WeightsError)


def check(directory: Path, config_attributes: dict | None = None, **fields) -> None:
    """Write ``fields`` (over a small base) as ``directory``/config.json and check it; the config object has them
    too, and ``config_attributes`` (what transformers adds: defaults, ``attribute_map``)."""
    fields = {"vocab_size": 1000, "hidden_size": 100, "num_hidden_layers": 2, **fields}
    (directory / "config.json").write_text(json.dumps(fields))
    check_config_sizes("x", SimpleNamespace(**{**fields, **(config_attributes or {})}), directory)


@pytest.mark.parametrize("fields", [dict(num_hidden_layers=2.5), dict(hidden_size=True), dict(head_dim="64"),
                                    dict(num_key_value_heads=-1)])
def test_the_check_itself_refuses_non_integer_and_non_positive_sizes(tmp_path, fields):
    (field, value), = fields.items()  # transformers' strict configs refuse some first: the check is the backstop
    with pytest.raises(ValueError, match=rf"^x: {field}={re.escape(repr(value))}: a size must be a positive integer"):
        check(tmp_path, num_attention_heads=4, **fields)


def test_an_explicit_head_dim_lets_hidden_size_not_split(tmp_path):
    check(tmp_path, num_attention_heads=3, num_key_value_heads=1, head_dim=32)  # Qwen3, Gemma
    check(tmp_path, num_attention_heads=3, attention_head_size=32)  # DeBERTa
    check(tmp_path, {"head_dim": 128}, num_attention_heads=3)  # Qwen3Config's default head_dim
    with pytest.raises(ValueError, match="x: hidden_size=100 is not a multiple of num_attention_heads=3"):
        check(tmp_path, num_attention_heads=3)


def test_key_value_heads_must_divide_the_query_heads(tmp_path):
    check(tmp_path, num_attention_heads=10, num_key_value_heads=2)
    with pytest.raises(ValueError, match="x: num_attention_heads=10 is not a multiple of num_key_value_heads=3"):
        check(tmp_path, num_attention_heads=10, num_key_value_heads=3)


def test_sizes_are_read_as_config_json_writes_them(tmp_path):
    # transformers' defaults for fields the file lacks are not checked (nomic's remote-code keys: n_embd, ...)
    check(tmp_path, {"hidden_size": 100, "num_attention_heads": 12}, hidden_size=None, n_embd=100, n_head=4)
    with pytest.raises(ValueError, match="hidden_size=100 is not a multiple of num_attention_heads=3"):
        check(tmp_path, {"attribute_map": {"num_attention_heads": "n_head"}}, n_head=3)  # GPT-2's attribute_map


def test_configs_within_reach_of_their_weights_pass(tmp_path):
    # a 64M-parameter margin, and up to 4 parameters per byte of weights (ALBERT-like sharing, 4-bit files)
    (tmp_path / "model.safetensors").write_bytes(b"\0" * 1000)
    check(tmp_path, vocab_size=600_000)
    with pytest.raises(ValueError, match="vocab_size=2000000, hidden_size=100, num_hidden_layers=2 imply ~2e"):
        check(tmp_path, vocab_size=2_000_000)
