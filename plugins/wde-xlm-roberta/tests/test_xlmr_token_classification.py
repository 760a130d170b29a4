"""``XLMRobertaForTokenClassification`` (wde-xlm-roberta) through ``classify_tokens``: random-weight configs with a
byte-level BPE (the pipeline's fallback word heuristic) against HF's model (per-token logits of texts packed into one
batch, every CPU backend) and transformers' token-classification pipeline (entities of every aggregation strategy,
long texts in stride windows); bf16 within a measured bound."""

from __future__ import annotations

import numpy as np
import pytest
from transformers import XLMRobertaConfig, XLMRobertaForTokenClassification

from wde_plugin_kit import save_random_model
from wde_plugin_kit.cpu_info import CPU_BACKENDS
from wde_plugin_kit.token_classification import (STRATEGIES, TEXTS, TOL, assert_same_entities, check_bf16,
                                                check_entities, check_packed_logits, check_stride_windows, label_maps,
                                                reference_logits, token_classifier_case)

MODEL_CLASS = XLMRobertaForTokenClassification
CONFIGS = {
    "small": dict(hidden_size=64, num_attention_heads=4, num_hidden_layers=2, intermediate_size=128,
                  max_position_embeddings=42),
    "odd": dict(hidden_size=96, num_attention_heads=3, num_hidden_layers=3, intermediate_size=200,
                max_position_embeddings=39, hidden_act="gelu_new", layer_norm_eps=1e-5),
}


def save_token_classifier(directory, case: str, *, seed: int = 0):
    """A random ``XLMRobertaForTokenClassification`` (weights of std 0.3) with the kit's byte-level BPE (<pad> = 1,
    XLM-R's padding index)."""
    config = XLMRobertaConfig(initializer_range=0.3, **label_maps(), type_vocab_size=1, pad_token_id=1, bos_token_id=0,
                              eos_token_id=2, **CONFIGS[case])
    config.architectures = ["XLMRobertaForTokenClassification"]
    return save_random_model(directory, config, model_class=XLMRobertaForTokenClassification, seed=seed,
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


def test_roberta_token_classifier_matches_hf_and_the_pipeline(tmp_path):
    """``RobertaForTokenClassification``, registered beside XLM-R's: logits and entities as HF's model and pipeline."""
    from transformers import RobertaConfig, RobertaForTokenClassification

    config = RobertaConfig(initializer_range=0.3, **label_maps(), type_vocab_size=1, pad_token_id=1, bos_token_id=0,
                           eos_token_id=2, **CONFIGS["small"])
    config.architectures = ["RobertaForTokenClassification"]
    directory = save_random_model(tmp_path / "roberta", config, model_class=RobertaForTokenClassification, seed=5,
                                  tokenizer="bpe")
    engine, reference, ner = token_classifier_case(directory, RobertaForTokenClassification)
    records = engine.classify_tokens(TEXTS)
    for record, logits in zip(records, reference_logits(reference, ner.tokenizer, TEXTS), strict=True):
        assert np.abs(record["logits"] - logits).max() <= TOL
    for strategy in ("simple", "max"):
        assert_same_entities(engine.classify_tokens(TEXTS, aggregation=strategy),
                             ner(TEXTS, aggregation_strategy=strategy))
