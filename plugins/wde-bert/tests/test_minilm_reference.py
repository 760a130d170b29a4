"""The real all-MiniLM-L6-v2 (packaged weights) against sentence-transformers on real paragraphs."""

from __future__ import annotations

import numpy as np
import pytest

from wde_plugin_kit.corpus import wiki_paragraphs
from wde_core import Engine

N_PARAGRAPHS = 512


@pytest.fixture(scope="module")
def minilm_engine(minilm_dir):
    return Engine(str(minilm_dir), device="cpu")


@pytest.fixture(scope="module")
def reference(minilm_dir):
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(minilm_dir), device="cpu")


@pytest.fixture(scope="module")
def paragraphs():
    return wiki_paragraphs(N_PARAGRAPHS)


def min_cosine(a: np.ndarray, b: np.ndarray) -> float:
    a = a / np.linalg.norm(a, axis=1, keepdims=True)
    b = b / np.linalg.norm(b, axis=1, keepdims=True)
    return float((a * b).sum(axis=1).min())


def test_matches_sentence_transformers_on_wiki_paragraphs(minilm_engine, reference, paragraphs):
    ours = minilm_engine.encode(paragraphs)
    theirs = reference.encode(paragraphs, batch_size=32, convert_to_numpy=True)
    assert ours.shape == theirs.shape == (N_PARAGRAPHS, 384)
    assert ours.dtype == np.float32
    assert min_cosine(ours, theirs) >= 0.99999
    assert np.abs(ours - theirs).max() <= 1e-4
    assert np.allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-5)


def test_long_paragraphs_are_truncated_like_sentence_transformers(minilm_engine, reference, paragraphs):
    long_text = " ".join(paragraphs[:6])  # far beyond max_seq_length=256
    assert len(minilm_engine.tokenizer.tokenizer(long_text)["input_ids"]) > 256
    ours = minilm_engine.encode([long_text])
    theirs = reference.encode([long_text], convert_to_numpy=True)
    assert np.abs(ours - theirs).max() <= 1e-4


def test_batch_composition_does_not_change_results(minilm_engine, paragraphs):
    texts = paragraphs[:48]
    batched = minilm_engine.encode(texts)
    one_by_one = np.stack([minilm_engine.encode(t) for t in texts])
    assert np.abs(batched - one_by_one).max() <= 1e-5
    small_batches = Engine(str(minilm_engine.pipeline.model.path), device="cpu", max_num_batched_tokens=512,
                           max_num_seqs=3)
    assert np.abs(small_batches.encode(texts) - batched).max() <= 1e-5


def test_dimensions_truncate_then_renormalize(minilm_engine, reference, paragraphs):
    texts = paragraphs[:16]
    ours = minilm_engine.encode(texts, dimensions=64)
    theirs = reference.encode(texts, convert_to_numpy=True, truncate_dim=64, normalize_embeddings=True)
    assert ours.shape == (16, 64)
    assert np.abs(ours - theirs).max() <= 1e-4
    raw = minilm_engine.encode(texts, dimensions=64, normalize=False)
    unnormalized = minilm_engine.encode(texts, normalize=False)
    assert np.abs(np.linalg.norm(unnormalized, axis=1) - 1).min() > 1e-2  # really not normalized
    assert np.abs(raw - unnormalized[:, :64]).max() <= 1e-6


def test_prompts_are_prepended(minilm_engine, reference):
    texts = ["what is anarchism?", "a philosophy of stateless societies"]
    ours = minilm_engine.encode(texts, prompt="query: ")
    theirs = reference.encode(texts, prompt="query: ", convert_to_numpy=True)
    assert np.abs(ours - theirs).max() <= 1e-4
    assert np.abs(ours - minilm_engine.encode(texts)).max() > 1e-3


def test_bfloat16_on_cpu_stays_within_its_measured_error(minilm_engine, paragraphs):
    texts = paragraphs[:200]
    full = minilm_engine.encode(texts)
    half = Engine(str(minilm_engine.pipeline.model.path), device="cpu", dtype="bfloat16").encode(texts)
    assert half.dtype == np.float32
    assert min_cosine(half, full) >= 0.9999
    assert np.abs(half - full).max() <= 5e-3
