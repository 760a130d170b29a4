"""BERT parity: random-weight configs built here against HF ``BertModel``, fp32, every CPU backend.

Token states are compared per sequence on packed batches of mixed lengths (1..max) with random
token types; pooled outputs through ``Engine.encode`` against pooling computed from HF states.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import AutoTokenizer, BertModel

from wde_plugin_kit.cpu_info import CPU_BACKENDS
from wde_plugin_kit.encoders import save_random_bert
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


def test_single_texts_and_pairs_in_one_batch_match_hf_classifier(tmp_path):
    """One batch mixing single texts and pairs classifies as transformers' BertForSequenceClassification does on each
    input alone (a pair's second segment has token type 1)."""
    from transformers import BertConfig, BertForSequenceClassification

    from wde_plugin_kit import save_random_model

    torch.manual_seed(5)
    config = BertConfig(architectures=["BertForSequenceClassification"], num_labels=3, **CONFIGS["small"])
    save_random_model(tmp_path, config, model_class=BertForSequenceClassification)
    reference = BertForSequenceClassification.from_pretrained(tmp_path).eval()
    tokenizer = AutoTokenizer.from_pretrained(tmp_path)
    inputs = ["a single text", ("a premise here", "and its hypothesis"), "another one", ("q", "a longer answer")]
    engine = Engine(str(tmp_path), device="cpu")
    ours = engine.classify(inputs, raw_scores=True)
    for item, scores in zip(inputs, ours):
        encoded = tokenizer(*item if isinstance(item, tuple) else (item,), return_tensors="pt")
        with torch.no_grad():
            logits = reference(**encoded).logits[0]
        assert encoded["token_type_ids"].any() == isinstance(item, tuple)
        got = np.array([scores[label] for label in reference.config.id2label.values()])
        assert np.abs(got - logits.numpy()).max() <= TOL


def test_batches_mixing_requests_with_and_without_token_types_give_zeros_to_the_latter(bert_case):
    """The tokenizer stage leaves a single text's token types out (all 0); a batch holding such a request beside one
    with types (a pair) gets zeros for it, and the token states match HF given those zeros."""
    directory, reference = bert_case
    engine = Engine(str(directory), device="cpu", attention_backend="torch_sdpa")
    requests = random_requests(reference.config, [5, 9, 21], seed=2)
    requests[0].token_type_ids = requests[2].token_type_ids = None
    model_input = engine.builder.build(requests)
    assert model_input.padding == 1  # the CPU row padding's row (35 tokens, in steps of 2) has type 0 too
    assert model_input.token_type_ids.tolist() == [0] * 5 + requests[1].token_type_ids + [0] * 22
    ours = wde_states(engine, requests)
    for r in requests:
        r.token_type_ids = r.token_type_ids or [0] * r.num_tokens
    expected = reference_states(reference, requests)
    assert max((a - b).abs().max().item() for a, b in zip(ours, expected)) <= TOL
