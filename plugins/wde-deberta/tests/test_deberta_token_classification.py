"""``DebertaV2ForTokenClassification`` (wde-deberta) through ``classify_tokens``: a v3-like config (log buckets,
shared keys, byte-level BPE) and a v2-like one (clamped distances, absolute positions, token types, WordPiece)
against HF's model (per-token logits of texts packed into one batch, every CPU backend) and transformers'
token-classification pipeline (entities of every aggregation strategy, long texts in stride windows); bf16 within
a measured bound."""

from __future__ import annotations

import pytest
from transformers import DebertaV2Config, DebertaV2ForTokenClassification

from wde_plugin_kit import save_random_model
from wde_plugin_kit.cpu_info import CPU_BACKENDS
from wde_plugin_kit.token_classification import (STRATEGIES, check_bf16, check_entities, check_packed_logits,
                                                check_stride_windows, label_maps, token_classifier_case)

MODEL_CLASS = DebertaV2ForTokenClassification
CONFIGS = {
    "v3-buckets": dict(hidden_size=72, num_attention_heads=3, intermediate_size=101, max_position_embeddings=48,
                       position_buckets=8, max_relative_positions=-1, share_att_key=True, norm_rel_ebd="layer_norm",
                       position_biased_input=False, type_vocab_size=0, pos_att_type=["p2c", "c2p"]),
    "v2-clamped": dict(hidden_size=64, num_attention_heads=4, intermediate_size=96, max_position_embeddings=40,
                       position_buckets=-1, max_relative_positions=16, share_att_key=False, norm_rel_ebd="none",
                       position_biased_input=True, type_vocab_size=2, pos_att_type=["p2c", "c2p"]),
}


def save_token_classifier(directory, case: str, *, seed: int = 0):
    """A random ``DebertaV2ForTokenClassification`` (weights of std 0.3) with the kit's BPE (v3) or WordPiece (v2)."""
    config = DebertaV2Config(num_hidden_layers=2, hidden_act="gelu", initializer_range=0.3, layer_norm_eps=1e-7,
                             relative_attention=True, **label_maps(), **CONFIGS[case])
    config.architectures = ["DebertaV2ForTokenClassification"]
    return save_random_model(directory, config, model_class=DebertaV2ForTokenClassification, seed=seed,
                             tokenizer="wordpiece" if config.type_vocab_size > 1 else "bpe")


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
