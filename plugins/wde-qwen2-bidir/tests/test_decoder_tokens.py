"""Decoder inputs and weights: EOS appended when the tokenizer config asks (room kept when
truncating), instruction prompts, prompts excluded from mean pooling, the LM head skipped."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from safetensors import safe_open
from tokenizers import Tokenizer, processors
from transformers import AutoTokenizer

from decoder_fixtures import EOS, hf_states, load_reference, save_random_decoder
from wde_core import Engine

INSTRUCT = "Instruct: Given a web search query, retrieve relevant passages that answer the query\nQuery: "
TEXTS = ["how do rotary embeddings work", "bidirectional attention in decoders", "x"]
LONG = "a long paragraph about packed batches " * 20


@pytest.fixture(scope="module")
def eos_dir(tmp_path_factory):
    """A random Qwen2ForCausalLM whose tokenizer config asks for EOS (the tokenizer itself does not add it)."""
    return save_random_decoder(tmp_path_factory.mktemp("qwen2-eos"), "qwen2", seed=5, add_eos_token=True,
                               max_position_embeddings=256)


@pytest.fixture(scope="module")
def eos_engine(eos_dir):
    return Engine(str(eos_dir), device="cpu")


def reference_ids(directory, text: str) -> list[int]:
    """What gte-Qwen2's tokenizer gives: the fast tokenizer's ids, then EOS."""
    tokenizer = AutoTokenizer.from_pretrained(directory)
    ids = tokenizer(text)["input_ids"]
    assert tokenizer.eos_token_id not in ids  # the HF tokenizer does not append it itself
    return ids + [tokenizer.eos_token_id]


def test_eos_is_appended_when_the_tokenizer_config_asks(eos_dir, eos_engine):
    requests = eos_engine.prepare("encode", TEXTS).requests
    assert [r.token_ids for r in requests] == [reference_ids(eos_dir, t) for t in TEXTS]
    assert "add_eos_token=true" in eos_engine.pipeline.reasons["eos"]


def test_truncation_keeps_room_for_eos(eos_dir):
    engine = Engine(str(eos_dir), device="cpu", max_model_len=16)
    (request,) = engine.prepare("encode", [LONG]).requests
    full = reference_ids(eos_dir, LONG)
    assert len(request.token_ids) == 16 and request.token_ids == full[:15] + full[-1:]
    with pytest.raises(ValueError, match="more than max_model_len=16"):
        engine.prepare("encode", [LONG], truncate=False).requests


def test_no_eos_without_the_config_flag(tmp_path):
    directory = save_random_decoder(tmp_path / "plain", "llama", num_hidden_layers=1)
    (request,) = Engine(str(directory), device="cpu").prepare("encode", ["no end of sequence here"]).requests
    assert request.token_ids == AutoTokenizer.from_pretrained(directory)("no end of sequence here")["input_ids"]


def test_no_second_eos_when_the_tokenizer_appends_it(tmp_path):
    directory = save_random_decoder(tmp_path / "self-eos", "qwen2", num_hidden_layers=1, add_eos_token=True)
    tokenizer = Tokenizer.from_file(str(directory / "tokenizer.json"))
    eos = tokenizer.token_to_id(EOS)
    tokenizer.post_processor = processors.TemplateProcessing(single=f"$A {EOS}", special_tokens=[(EOS, eos)])
    tokenizer.save(str(directory / "tokenizer.json"))
    (request,) = Engine(str(directory), device="cpu").prepare("encode", ["ends with one EOS"]).requests
    assert request.token_ids[-1] == eos and request.token_ids[-2] != eos


def test_last_token_embedding_reads_the_eos_state(eos_dir, eos_engine):
    reference = load_reference(eos_dir)
    expected = [hf_states(reference, reference_ids(eos_dir, t), bidirectional=False)[-1] for t in TEXTS]
    expected = torch.nn.functional.normalize(torch.stack(expected), dim=-1).numpy()
    assert np.abs(eos_engine.encode(TEXTS) - expected).max() <= 1e-4


def test_instruction_prompt(eos_dir, eos_engine):
    with_prompt = eos_engine.encode(TEXTS, prompt=INSTRUCT)
    assert np.abs(with_prompt - eos_engine.encode([INSTRUCT + t for t in TEXTS])).max() <= 1e-6
    reference = load_reference(eos_dir)
    expected = [hf_states(reference, reference_ids(eos_dir, INSTRUCT + t), bidirectional=False)[-1] for t in TEXTS]
    expected = torch.nn.functional.normalize(torch.stack(expected), dim=-1).numpy()
    assert np.abs(with_prompt - expected).max() <= 1e-4
    assert np.abs(with_prompt - eos_engine.encode(TEXTS)).max() > 1e-3


def write_st_files(directory, *, pooling: str, include_prompt: bool, prompts: dict[str, str]) -> None:
    """sentence-transformers files: Transformer, Pooling (mode, include_prompt), Normalize; prompts."""
    modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
               {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
               {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}]
    (directory / "modules.json").write_text(json.dumps(modules))
    (directory / "1_Pooling").mkdir()
    (directory / "1_Pooling" / "config.json").write_text(json.dumps(
        {"word_embedding_dimension": 64, f"pooling_mode_{pooling}": True, "include_prompt": include_prompt}))
    (directory / "config_sentence_transformers.json").write_text(json.dumps({"prompts": prompts}))


def test_named_prompt_and_mean_pooling_without_the_prompt(tmp_path):
    """LLM2Vec-style: bidirectional, mean pooling over the text only (the instruction excluded)."""
    instruction = "Given a claim, find documents that refute it:\n"
    directory = save_random_decoder(tmp_path / "mean", "mistral", seed=2, add_eos_token=True,
                                    max_position_embeddings=256)
    write_st_files(directory, pooling="mean_tokens", include_prompt=False, prompts={"query": instruction})
    engine = Engine(str(directory), device="cpu", enable_bidirectional=True)
    assert (engine.pipeline.settings.pooling, engine.pipeline.reasons["pooling"]) == ("mean", "1_Pooling/config.json")
    ours = engine.encode(TEXTS, prompt_name="query")
    assert np.abs(ours - engine.encode(TEXTS, prompt=instruction)).max() <= 1e-6
    prompt_len = len(AutoTokenizer.from_pretrained(directory)(instruction)["input_ids"])
    requests = engine.prepare("encode", TEXTS, prompt_name="query").requests
    assert [r.prompt_len for r in requests] == [prompt_len] * len(TEXTS)
    reference = load_reference(directory)
    expected = [hf_states(reference, reference_ids(directory, instruction + t), bidirectional=True)[prompt_len:]
                .mean(0) for t in TEXTS]
    expected = torch.nn.functional.normalize(torch.stack(expected), dim=-1).numpy()
    assert np.abs(ours - expected).max() <= 1e-4


def test_the_language_model_head_is_skipped(eos_dir, eos_engine):
    with safe_open(str(eos_dir / "model.safetensors"), framework="pt") as f:
        assert "lm_head.weight" in f.keys()  # noqa: SIM118 (safe_open has no __contains__); a Qwen2ForCausalLM checkpoint, untied head
    model = eos_engine.executor.worker.model
    assert model.map_checkpoint_name("lm_head.weight") is None
    assert model.map_checkpoint_name("model.layers.0.self_attn.rotary_emb.inv_freq") is None
    assert model.map_checkpoint_name("model.layers.1.self_attn.k_proj.bias") == (
        "layers.1.self_attn.qkv_proj.bias", slice(64, 96))  # 4 query heads of 16, then 2 key heads
    assert model.map_checkpoint_name("layers.0.mlp.up_proj.weight") == ("layers.0.mlp.gate_up_proj.weight",
                                                                        slice(96, 192))
    assert model.map_checkpoint_name("model.norm.weight") == ("norm.weight", None)
    assert not any("lm_head" in name for name, _ in model.named_parameters())
