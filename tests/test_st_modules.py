"""sentence-transformers files as sentence-transformers 6 saves them: Dense modules after pooling (LaBSE,
EmbeddingGemma) and the max length in tokenizer_config.json; wde vs sentence-transformers."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from sentence_transformers import SentenceTransformer
from sentence_transformers.sentence_transformer.modules import Dense, Normalize, Pooling, Transformer

from conftest import save_random_bert
from wde_core import Engine

TEXTS = ["a short one", "a somewhat longer sentence about the weather in spring",
         "Dense layers project the pooled vector", "x " * 40]


def _save_st_model(directory, dense_modules, *, pooling="mean", normalize=True, max_seq_length=128):
    """A random BERT with ``dense_modules`` (built by the caller from the hidden size 64) saved by ST itself."""
    bert = save_random_bert(directory / "bert")
    torch.manual_seed(3)
    modules = [Transformer(str(bert), max_seq_length=max_seq_length), Pooling(64, pooling), *dense_modules(64)]
    model = SentenceTransformer(modules=modules + ([Normalize()] if normalize else []), device="cpu")
    model.save(str(directory / "st"))
    return directory / "st", model


@pytest.mark.parametrize("case", ["tanh", "two-identity", "residual-projected", "residual-same", "cls-no-normalize"])
def test_dense_modules_match_sentence_transformers(tmp_path, case):
    builds = {
        "tanh": lambda h: [Dense(h, h)],  # LaBSE: Tanh, with bias
        "two-identity": lambda h: [Dense(h, 3 * h, bias=False, activation_function=None),  # EmbeddingGemma
                                   Dense(3 * h, 48, bias=False, activation_function=None)],
        "residual-projected": lambda h: [Dense(h, 40, activation_function=torch.nn.GELU(), use_residual=True)],
        "residual-same": lambda h: [Dense(h, h, activation_function=torch.nn.ReLU(), use_residual=True)],
        "cls-no-normalize": lambda h: [Dense(h, 24, activation_function=torch.nn.Sigmoid())],
    }
    pooling, normalize = ("cls", False) if case == "cls-no-normalize" else ("mean", True)
    path, reference = _save_st_model(tmp_path, builds[case], pooling=pooling, normalize=normalize)
    expected = reference.encode(TEXTS, convert_to_numpy=True)
    with Engine(str(path)) as engine:
        got = np.stack(engine.encode(TEXTS))
        assert engine.pipeline.model.embedding_size == expected.shape[1]
        assert "after pooling" in engine.pipeline.reasons["dense"]
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, atol=1e-5)


def test_dimensions_are_checked_against_the_projected_size(tmp_path):
    path, reference = _save_st_model(tmp_path, lambda h: [Dense(h, 24, activation_function=None)])
    with Engine(str(path)) as engine:
        with pytest.raises(ValueError, match="dimensions=40 exceeds the model's embedding size 24"):
            engine.encode(TEXTS, dimensions=40)
        assert len(engine.encode(TEXTS, dimensions=16)[0]) == 16


def test_a_dense_module_with_an_unknown_activation_is_refused_by_name(tmp_path):
    path, _ = _save_st_model(tmp_path, lambda h: [Dense(h, h)])
    config_file = path / "2_Dense" / "config.json"
    config = json.loads(config_file.read_text())
    config_file.write_text(json.dumps({**config, "activation_function": "my_package.Swish"}))
    with pytest.raises(ValueError, match=r"unsupported sentence-transformers modules: Dense \(2_Dense: activation Swish"):
        Engine(str(path))


def test_the_max_length_sentence_transformers_6_keeps_in_the_tokenizer_config(tmp_path):
    # sentence-transformers >= 6 writes no max_seq_length into sentence_bert_config.json: it is the tokenizer's
    # model_max_length, capped at max_position_embeddings (128 here), as older releases did when it was absent
    path, reference = _save_st_model(tmp_path, lambda h: [], max_seq_length=20)
    assert "max_seq_length" not in json.loads((path / "sentence_bert_config.json").read_text())
    long_text = ["word " * 60, "short"]
    with Engine(str(path)) as engine:
        assert engine.pipeline.settings.max_model_len == reference.max_seq_length == 20
        assert engine.pipeline.reasons["max_model_len"] == "tokenizer_config.json model_max_length"
        np.testing.assert_allclose(np.stack(engine.encode(long_text)), reference.encode(long_text), atol=1e-5)
