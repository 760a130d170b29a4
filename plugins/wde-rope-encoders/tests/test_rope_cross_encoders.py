"""GTE v2 and NomicBert cross-encoders (``...ForSequenceClassification``, wde-rope-encoders on wde-reranker's
workflows): random-weight models against HF logits on every length packed in mixed batches, every CPU backend,
and against sentence-transformers' CrossEncoder on pairs."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import (GteConfig, GteForSequenceClassification, NomicBertConfig,
                          NomicBertForSequenceClassification)

from wde_plugin_kit.encoders import random_sequences, run_raw
from wde_core import Engine
from wde_plugin_kit import save_random_model

TOL = 1e-4


LABELS = ["contradiction", "entailment", "neutral"]
CASES = {  # gte of odd sizes (head_dim 20, intermediate 77)
    "gte": (GteConfig, GteForSequenceClassification,
            dict(hidden_size=60, num_attention_heads=3, num_hidden_layers=2, intermediate_size=77,
                 max_position_embeddings=40, hidden_act="gelu", type_vocab_size=2)),
    "nomic": (NomicBertConfig, NomicBertForSequenceClassification,
              dict(hidden_size=32, num_attention_heads=2, num_hidden_layers=2, intermediate_size=64,
                   max_position_embeddings=48)),
}
QUERY = "Which animal jumps over the dog?"
DOCS = ["The quick brown fox jumps over the lazy dog.", "Stock markets fell sharply on Monday.",
        "A fox is a small omnivorous mammal.", "dogs " * 200, "Foxes and dogs are both canids."]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """``(case, num_labels) -> (directory, HF model)``, built on first use."""
    built = {}

    def get(case: str, num_labels: int):
        if (case, num_labels) not in built:
            config_class, model_class, sizes = CASES[case]
            labels = {i: label for i, label in enumerate(LABELS[:num_labels])} if num_labels > 1 else {}
            config = config_class(**sizes, num_labels=num_labels, initializer_range=0.1,
                                  **({"id2label": labels, "label2id": {v: k for k, v in labels.items()}}
                                     if labels else {}))
            config.architectures = [model_class.__name__]
            directory = save_random_model(tmp_path_factory.mktemp(f"{case}-{num_labels}"), config,
                                          model_class=model_class, seed=len(built))
            built[case, num_labels] = directory, model_class.from_pretrained(directory).eval()
        return built[case, num_labels]

    return get


def hf_logits_alone(model, sequences) -> np.ndarray:
    """HF's logits for each token sequence run alone."""
    with torch.no_grad():
        return np.stack([model(input_ids=torch.tensor([ids]),
                               **({} if types is None else {"token_type_ids": torch.tensor([types])})).logits[0].numpy()
                         for ids, types in sequences])


@pytest.mark.parametrize("backend", ["torch_sdpa", "eager"])
@pytest.mark.parametrize("num_labels", [1, 3])
@pytest.mark.parametrize("case", sorted(CASES))
def test_every_length_in_packed_mixed_batches_matches_hf(models, case, num_labels, backend):
    directory, reference = models(case, num_labels)
    with Engine(str(directory), attention_backend=backend, max_num_batched_tokens=200) as engine:
        assert engine.task == ("rerank" if num_labels == 1 else "classify")
        max_len = engine.pipeline.settings.max_model_len
        sequences = random_sequences(engine.pipeline.model.config, max_len, seed=num_labels)
        ours = run_raw(engine, sequences)
    theirs = hf_logits_alone(reference, sequences)
    assert ours.shape == theirs.shape == (max_len, num_labels)
    assert np.std(theirs) > 0.05  # logits that differ between inputs, not a constant
    assert np.abs(ours - theirs).max() <= TOL


@pytest.mark.parametrize("case", sorted(CASES))
def test_scores_and_labels_match_sentence_transformers_cross_encoder(models, case):
    from sentence_transformers import CrossEncoder

    pairs = [(QUERY, d) for d in DOCS]
    for num_labels in (1, 3):
        directory, _ = models(case, num_labels)
        with Engine(str(directory)) as engine:
            reference = CrossEncoder(str(directory), device="cpu", max_length=engine.pipeline.settings.max_model_len)
            if num_labels == 1:
                ours, theirs = np.asarray(engine.score(pairs)), reference.predict(pairs)
                ranked = [r["index"] for r in engine.rerank(QUERY, DOCS)]
                assert ranked == [r["corpus_id"] for r in reference.rank(QUERY, DOCS)]
            else:
                ours = np.array([list(r.values()) for r in engine.classify(pairs)]).ravel()
                theirs = reference.predict(pairs, activation_fn=torch.nn.Softmax(dim=-1)).ravel()
        cosine = float(ours @ theirs / (np.linalg.norm(ours) * np.linalg.norm(theirs)))
        assert cosine >= 0.99999 and np.abs(ours - theirs).max() <= TOL, (case, num_labels, cosine)
