"""XLM-RoBERTa cross-encoders (``XLMRobertaForSequenceClassification``, the bge-reranker shape) on
wde-cross-encoder's workflows: a random head on the real multilingual-e5-small trunk's tokenizer against HF
logits (both CPU attention backends) and sentence-transformers' ``CrossEncoder.predict`` / ``rank``."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch
from transformers import AutoTokenizer, XLMRobertaConfig, XLMRobertaForSequenceClassification

from wde_core import Engine

TOL = 1e-4
QUERY = "Which animal jumps over the dog?"
DOCS = ["The quick brown fox jumps over the lazy dog.", "Stock markets fell sharply on Monday.",
        "A fox is a small omnivorous mammal.", "", "dogs " * 400, "Der schnelle braune Fuchs springt."]
XLMR_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "sentencepiece.bpe.model")


def save_xlmr_classifier(directory, tokenizer_dir, *, num_labels=1, seed=0):
    """A random-weight ``XLMRobertaForSequenceClassification`` (XLM-R's vocabulary and position offset) with
    the e5 directory's tokenizer files."""
    torch.manual_seed(seed)
    cfg = XLMRobertaConfig(vocab_size=250037, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                           intermediate_size=64, max_position_embeddings=98, type_vocab_size=1, pad_token_id=1,
                           bos_token_id=0, eos_token_id=2, num_labels=num_labels)
    XLMRobertaForSequenceClassification(cfg).eval().save_pretrained(directory)
    for name in XLMR_TOKENIZER_FILES:
        shutil.copy(tokenizer_dir / name, directory / name)
    return directory


@pytest.fixture(scope="module")
def xlmr_ce(tmp_path_factory, e5_dirs):
    return save_xlmr_classifier(tmp_path_factory.mktemp("xlmr-ce"), e5_dirs["xlmr"], seed=2)


def hf_xlmr_logits(directory, pairs, max_length) -> np.ndarray:
    """HF's logits for the pairs: one padded batch, documents truncated (``only_second``)."""
    model = XLMRobertaForSequenceClassification.from_pretrained(directory, attn_implementation="eager").eval()
    batch = AutoTokenizer.from_pretrained(directory)([q for q, _ in pairs], [d for _, d in pairs], padding=True,
                                                     truncation="only_second", max_length=max_length,
                                                     return_tensors="pt")
    with torch.no_grad():
        return model(**batch).logits.numpy()


@pytest.mark.parametrize("backend", ["torch_sdpa", "eager"])
def test_xlmr_logits_and_sigmoid_scores_match_hf(xlmr_ce, backend):
    engine = Engine(str(xlmr_ce), device="cpu", attention_backend=backend)
    assert (engine.task, engine.pipeline.link.variant, engine.pipeline.link.provider) == (
        "rerank", "single-logit", "wde-xlm-roberta")
    pairs = [(QUERY, d) for d in DOCS] + [("", "empty query"), ("short", "x")]
    theirs = hf_xlmr_logits(xlmr_ce, pairs, engine.pipeline.settings.max_model_len)[:, 0]
    assert np.abs(engine.score(pairs, raw_scores=True) - theirs).max() <= TOL
    assert np.abs(engine.score(pairs) - 1 / (1 + np.exp(-theirs))).max() <= TOL


def test_xlmr_rerank_matches_sentence_transformers_cross_encoder(xlmr_ce):
    from sentence_transformers import CrossEncoder

    engine = Engine(str(xlmr_ce), device="cpu")
    reference = CrossEncoder(str(xlmr_ce), device="cpu", max_length=engine.pipeline.settings.max_model_len)
    ours, theirs = engine.rerank(QUERY, DOCS, return_documents=True), reference.rank(QUERY, DOCS, return_documents=True)
    assert [(r["index"], r["document"]) for r in ours] == [(r["corpus_id"], r["text"]) for r in theirs]
    assert np.abs(np.array([r["score"] for r in ours]) - [r["score"] for r in theirs]).max() <= TOL


def test_xlmr_classifier_gives_label_probabilities(tmp_path, e5_dirs):
    directory = save_xlmr_classifier(tmp_path / "nli", e5_dirs["xlmr"], num_labels=3, seed=4)
    engine = Engine(str(directory), device="cpu")
    assert engine.task == "classify" and engine.pipeline.reasons["activation"] == "softmax over labels"
    pairs = [(QUERY, d) for d in DOCS[:4]]
    logits = torch.from_numpy(hf_xlmr_logits(directory, pairs, engine.pipeline.settings.max_model_len))
    ours = np.array([list(r.values()) for r in engine.classify(pairs)])
    assert np.abs(ours - torch.softmax(logits, -1).numpy()).max() <= TOL
