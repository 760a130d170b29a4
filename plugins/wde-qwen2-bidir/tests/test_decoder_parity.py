"""Decoder parity: random-weight Qwen2, Llama and Mistral against HF, fp32, every CPU backend.

Causal attention is compared with the HF model as is; bidirectional with the HF model given an
explicit non-causal 4D attention mask. Token states are compared per sequence on packed batches;
packing must not leak attention across sequences; pooled outputs through ``Engine.encode``.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import AutoTokenizer

from decoder_fixtures import (CONFIGS, hf_states, load_reference, random_token_lists, save_random_decoder,
                              wde_states)
from wde_plugin_kit.cpu_info import CPU_BACKENDS
from wde_core import Engine

BACKENDS = CPU_BACKENDS
MODES = {"causal": False, "bidirectional": True}  # mode -> enable_bidirectional
TOL = 1e-4
LENGTHS = [1, 2, 7, 64, 13, 40, 3, 29, 64, 18]


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def decoder_case(request, tmp_path_factory):
    """A saved random decoder directory (its family's quirks on) and the HF base model loaded from it."""
    directory = save_random_decoder(tmp_path_factory.mktemp(request.param), request.param, seed=3)
    return directory, load_reference(directory)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("mode", sorted(MODES))
def test_token_states_match_hf_on_packed_batches(decoder_case, backend, mode):
    directory, reference = decoder_case
    engine = Engine(str(directory), device="cpu", attention_backend=backend, enable_bidirectional=MODES[mode])
    assert engine.pipeline.settings.causal is (mode == "causal")
    tokens = random_token_lists(LENGTHS, seed=1)
    for chunk in (tokens[:5], tokens[5:]):  # packed batches of mixed lengths, positions restarting at 0
        for ours, ids in zip(wde_states(engine, chunk), chunk):
            theirs = hf_states(reference, ids, bidirectional=MODES[mode])
            assert ours.shape == theirs.shape
            assert (ours - theirs).abs().max().item() <= TOL


def test_bidirectional_differs_from_causal(decoder_case):
    """The two modes really differ (else the parity tests above would prove nothing)."""
    directory, reference = decoder_case
    ids = random_token_lists([12], seed=2)[0]
    causal, bidirectional = (hf_states(reference, ids, bidirectional=b) for b in (False, True))
    assert (causal[:-1] - bidirectional[:-1]).abs().max().item() > 1e-2
    engine = Engine(str(directory), device="cpu", enable_bidirectional=True)
    assert (wde_states(engine, [ids])[0] - causal).abs().max().item() > 1e-2


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("mode", sorted(MODES))
def test_packing_does_not_leak_across_sequences(decoder_case, backend, mode):
    directory, _ = decoder_case
    engine = Engine(str(directory), device="cpu", attention_backend=backend, enable_bidirectional=MODES[mode])
    tokens = random_token_lists([9, 1, 33, 64, 5, 17], seed=4)
    packed = wde_states(engine, tokens)
    for ids, together in zip(tokens, packed):
        alone = wde_states(engine, [ids])[0]
        assert (alone - together).abs().max().item() <= 1e-5


def hf_pooled(reference, token_lists, pooling, bidirectional) -> np.ndarray:
    """Normalized last-token or mean pooling of HF states, one sequence at a time."""
    pooled = []
    for ids in token_lists:
        states = hf_states(reference, ids, bidirectional=bidirectional)
        pooled.append(states[-1] if pooling == "last" else states.mean(0))
    return torch.nn.functional.normalize(torch.stack(pooled), dim=-1).numpy()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("pooling", ["last", "mean"])
def test_pooled_outputs_match_hf(decoder_case, backend, pooling):
    directory, reference = decoder_case
    tokenizer = AutoTokenizer.from_pretrained(directory)
    texts = ["a", "Hello world, this is wde.", "word " * 30, "Odd lengths: 1 22 333 4444 55555 !?"]
    for bidirectional in (False, True):
        engine = Engine(str(directory), device="cpu", attention_backend=backend, pooling=pooling,
                        enable_bidirectional=bidirectional)
        token_lists = [tokenizer(t, truncation=True, max_length=64)["input_ids"] for t in texts]
        expected = hf_pooled(reference, token_lists, pooling, bidirectional)
        ours = engine.encode(texts)
        assert ours.shape == expected.shape
        assert np.abs(ours - expected).max() <= TOL


def test_last_token_pooling_and_normalization_are_the_decoder_defaults(decoder_case):
    directory, reference = decoder_case
    engine = Engine(str(directory), device="cpu")
    settings, reasons = engine.pipeline.settings, engine.pipeline.reasons
    assert (settings.pooling, settings.normalize, settings.causal) == ("last", True, True)
    assert reasons["pooling"] == reasons["normalize"] == "default of wde-qwen2-bidir"
    raw = engine.encode("the raw last-token state", normalize=False)
    ids = AutoTokenizer.from_pretrained(directory)("the raw last-token state")["input_ids"]
    assert np.abs(raw - hf_states(reference, ids, bidirectional=False)[-1].numpy()).max() <= TOL
