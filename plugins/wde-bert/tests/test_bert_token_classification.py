"""``BertForTokenClassification`` (wde-bert) through ``classify_tokens``: random-weight configs against HF's model
(per-token logits of texts packed into one batch, every CPU backend) and transformers' token-classification
pipeline (entities of every aggregation strategy, long texts in stride windows); bf16 within a measured bound."""

from __future__ import annotations

import pytest
from transformers import BertConfig, BertForTokenClassification

from wde_plugin_kit import save_random_model
from wde_plugin_kit.cpu_info import CPU_BACKENDS
from wde_plugin_kit.token_classification import (STRATEGIES, check_bf16, check_entities, check_packed_logits,
                                                check_stride_windows, label_maps, token_classifier_case)

MODEL_CLASS = BertForTokenClassification
CONFIGS = {
    "small": dict(hidden_size=64, num_attention_heads=4, num_hidden_layers=2, intermediate_size=128,
                  max_position_embeddings=40),
    "odd": dict(hidden_size=96, num_attention_heads=3, num_hidden_layers=3, intermediate_size=200,
                max_position_embeddings=33, type_vocab_size=3, hidden_act="gelu_new", layer_norm_eps=1e-5),
}


def save_token_classifier(directory, case: str, *, seed: int = 0):
    """A random ``BertForTokenClassification`` (weights of std 0.3, so labels spread) with the kit's WordPiece."""
    config = BertConfig(initializer_range=0.3, **label_maps(), **CONFIGS[case])
    config.architectures = ["BertForTokenClassification"]
    return save_random_model(directory, config, model_class=BertForTokenClassification, seed=seed)


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def case(request, tmp_path_factory):
    """A saved random token classifier with our engine, HF's model and transformers' pipeline over it."""
    return token_classifier_case(save_token_classifier(tmp_path_factory.mktemp(request.param), request.param, seed=4),
                                 MODEL_CLASS)


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_per_token_logits_match_hf_on_a_packed_batch(case, backend):
    check_packed_logits(case, backend)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_entities_match_the_pipeline(case, strategy):
    check_entities(case, strategy)


@pytest.mark.parametrize("stride", [0, 6, 20])
@pytest.mark.parametrize("strategy", ["simple", "first", "average", "max"])
def test_long_texts_in_stride_windows_match_the_pipeline(case, strategy, stride):
    check_stride_windows(case, strategy, stride)


def test_bf16_logits_within_the_measured_bound(case):
    check_bf16(case, MODEL_CLASS)
