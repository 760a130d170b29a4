"""``ModernBertForTokenClassification`` (wde-modernbert) through ``classify_tokens``: random-weight configs (global
and local layers, texts longer than the local window) against HF's model (per-token logits of texts packed into one
batch, every CPU backend) and transformers' token-classification pipeline (entities of every aggregation strategy,
long texts in stride windows); bf16 within a measured bound."""

from __future__ import annotations

import pytest
from transformers import ModernBertConfig, ModernBertForTokenClassification

from wde_plugin_kit import save_random_model
from wde_plugin_kit.cpu_info import CPU_BACKENDS
from wde_plugin_kit.token_classification import (STRATEGIES, check_bf16, check_entities, check_packed_logits,
                                                check_stride_windows, label_maps, token_classifier_case)

MODEL_CLASS = ModernBertForTokenClassification
CONFIGS = {
    "base": dict(hidden_size=32, num_attention_heads=2, num_hidden_layers=4, intermediate_size=48,
                 max_position_embeddings=40, local_attention=8, global_attn_every_n_layers=3),
    "odd": dict(hidden_size=60, num_attention_heads=3, num_hidden_layers=5, intermediate_size=77,
                max_position_embeddings=37, local_attention=7, global_attn_every_n_layers=2, norm_bias=True,
                attention_bias=True, mlp_bias=True, classifier_bias=True, classifier_activation="silu",
                norm_eps=1e-6),
}


def save_token_classifier(directory, case: str, *, seed: int = 0):
    """A random ``ModernBertForTokenClassification`` (weights of std 0.3) with the kit's byte-level BPE."""
    config = ModernBertConfig(vocab_size=100, pad_token_id=1, bos_token_id=0, eos_token_id=2, cls_token_id=0,
                              sep_token_id=2, initializer_range=0.3, **label_maps(), **CONFIGS[case])
    config.architectures = ["ModernBertForTokenClassification"]
    return save_random_model(directory, config, model_class=ModernBertForTokenClassification, seed=seed,
                             tokenizer="bpe")


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
