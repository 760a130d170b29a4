"""Real-weight tier (``nox -s slow``): all-MiniLM-L6-v2 over the benchmark corpus, every CPU backend."""

from __future__ import annotations

import numpy as np
import pytest

from wde_core import Engine

pytestmark = pytest.mark.slow


# the eager backend (the plain reference computation, in every fast-tier parity test too) on the first 500: CI's time
@pytest.mark.parametrize("backend,n", [("torch_sdpa", 2000), ("eager", 500)])
def test_benchmark_corpus_matches_sentence_transformers(minilm_dir, minilm_corpus, backend, n):
    """Against sentence-transformers in float32 (the root conftest's reference, shared with the bf16 check)."""
    texts, reference = minilm_corpus[0][:n], minilm_corpus[1][:n]
    ours = Engine(str(minilm_dir), device="cpu", attention_backend=backend).encode(texts)
    cosine = (ours * reference).sum(1) / (np.linalg.norm(ours, axis=1) * np.linalg.norm(reference, axis=1))
    assert cosine.min() >= 0.99999
    assert np.abs(ours - reference).max() <= 1e-4
