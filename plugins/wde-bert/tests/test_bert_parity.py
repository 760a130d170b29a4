"""BERT parity: random-weight configs built here against HF ``BertModel``, fp32, every CPU backend.

Token states are compared per sequence on packed batches of mixed lengths (1..max) with random
token types; pooled outputs through ``Engine.encode`` against pooling computed from HF states.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import AutoTokenizer, BertModel

from conftest import CPU_BACKENDS, save_random_bert
from wde_plugin_kit.packed import random_requests, reference_states, wde_states
from wde_core import Engine

BACKENDS = CPU_BACKENDS
CONFIGS = {
    "small": dict(hidden_size=64, num_attention_heads=4, num_hidden_layers=2, intermediate_size=128,
                  max_position_embeddings=48),
    "odd": dict(hidden_size=96, num_attention_heads=3, num_hidden_layers=3, intermediate_size=200,
                max_position_embeddings=37, type_vocab_size=3, hidden_act="gelu_new", layer_norm_eps=1e-5),
    "narrow-heads": dict(hidden_size=48, num_attention_heads=12, num_hidden_layers=1, intermediate_size=64,
                         max_position_embeddings=64),
}
TOL = 1e-4


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def bert_case(request, tmp_path_factory):
    """A saved random BERT directory and the HF reference model loaded from it."""
    directory = save_random_bert(tmp_path_factory.mktemp(request.param), seed=7, **CONFIGS[request.param])
    reference = BertModel.from_pretrained(directory, attn_implementation="eager").eval()
    return directory, reference


@pytest.mark.parametrize("backend", BACKENDS)
def test_token_states_match_hf_on_packed_batches(bert_case, backend):
    directory, reference = bert_case
    engine = Engine(str(directory), device="cpu", attention_backend=backend)
    max_len = reference.config.max_position_embeddings
    lengths = list(range(1, max_len + 1))
    rng = np.random.default_rng(3)
    rng.shuffle(lengths)
    requests = random_requests(reference.config, lengths)
    for i in range(0, len(requests), 9):  # packed batches of mixed lengths
        chunk = requests[i: i + 9]
        for ours, theirs in zip(wde_states(engine, chunk), reference_states(reference, chunk)):
            assert ours.shape == theirs.shape
            assert (ours - theirs).abs().max().item() <= TOL


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("pooling", ["cls", "mean", "max"])
def test_pooled_outputs_match_hf(bert_case, backend, pooling):
    directory, reference = bert_case
    tokenizer = AutoTokenizer.from_pretrained(directory)
    texts = ["a", "Hello world, this is wde.", "word " * 30, "Odd lengths: 1 22 333 4444 55555 !?"]
    engine = Engine(str(directory), device="cpu", attention_backend=backend, pooling=pooling, normalize=True)
    ours = engine.encode(texts)
    batch = tokenizer(texts, padding=True, truncation=True, max_length=engine.pipeline.settings.max_model_len,
                      return_tensors="pt")
    with torch.no_grad():
        states = reference(**batch).last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1).float()
    expected = {
        "cls": states[:, 0],
        "mean": (states * mask).sum(1) / mask.sum(1),
        "max": states.masked_fill(mask == 0, float("-inf")).max(1).values,
    }[pooling]
    expected = torch.nn.functional.normalize(expected, dim=-1).numpy()
    assert ours.shape == expected.shape
    assert np.abs(ours - expected).max() <= TOL


def test_unnormalized_cls_is_the_raw_first_token_state(bert_case):
    directory, reference = bert_case
    engine = Engine(str(directory), device="cpu")  # no sentence-transformers files: the plugin default, CLS, raw
    assert engine.pipeline.settings.pooling == "cls" and engine.pipeline.settings.normalize is False
    tokenizer = AutoTokenizer.from_pretrained(directory)
    ours = engine.encode("token states of the first token")
    with torch.no_grad():
        expected = reference(**tokenizer("token states of the first token", return_tensors="pt")).last_hidden_state
    assert ours.ndim == 1
    assert np.abs(ours - expected[0, 0].numpy()).max() <= TOL


def test_every_backend_matches_hf_and_the_others(tiny_st_bert_dir):
    """Each backend's mean-pooled, normalized embeddings (the directory's sentence-transformers settings) against
    HF ``BertModel`` states pooled here, and every backend against the first."""
    texts = [("lorem ipsum " * k).strip() for k in range(1, 40, 3)]  # the longest are cut at 128 tokens
    engines = {b: Engine(str(tiny_st_bert_dir), device="cpu", attention_backend=b) for b in BACKENDS}
    outputs = {b: engine.encode(texts) for b, engine in engines.items()}
    assert engines[BACKENDS[0]].pipeline.settings.max_model_len == 128
    reference = BertModel.from_pretrained(tiny_st_bert_dir, attn_implementation="eager").eval()
    batch = AutoTokenizer.from_pretrained(tiny_st_bert_dir)(texts, padding=True, truncation=True, max_length=128,
                                                            return_tensors="pt")
    with torch.no_grad():
        states = reference(**batch).last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1).float()
    expected = torch.nn.functional.normalize((states * mask).sum(1) / mask.sum(1), dim=-1).numpy()
    assert len(outputs) == len(BACKENDS) >= 2
    for backend, ours in outputs.items():
        assert ours.shape == expected.shape
        assert np.abs(ours - expected).max() <= TOL, f"{backend} differs from HF"
        assert np.abs(ours - outputs[BACKENDS[0]]).max() <= 1e-5, f"{backend} differs from {BACKENDS[0]}"
