"""Real-weight tier (``nox -s slow``): all-MiniLM-L6-v2 over the benchmark corpus, every CPU backend."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import wiki_paragraphs
from wde_core import Engine

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def corpus_and_reference(minilm_dir):
    from sentence_transformers import SentenceTransformer

    texts = wiki_paragraphs(2000)
    reference = SentenceTransformer(str(minilm_dir), device="cpu").encode(texts, batch_size=64)
    return texts, reference


# the eager backend (the plain reference computation, in every fast-tier parity test too) on the first 500: CI's time
@pytest.mark.parametrize("backend,n", [("torch_sdpa", 2000), ("eager", 500)])
def test_benchmark_corpus_matches_sentence_transformers(minilm_dir, corpus_and_reference, backend, n):
    texts, reference = corpus_and_reference[0][:n], corpus_and_reference[1][:n]
    ours = Engine(str(minilm_dir), device="cpu", attention_backend=backend).encode(texts)
    cosine = (ours * reference).sum(1) / (np.linalg.norm(ours, axis=1) * np.linalg.norm(reference, axis=1))
    assert cosine.min() >= 0.99999
    assert np.abs(ours - reference).max() <= 1e-4
