"""``maxsim`` against ColBERT's late-interaction score written out in torch (for each query token, its best inner
product with a document token, summed), and the multi-vector output split back per request."""

from __future__ import annotations

import numpy as np
import torch

from wde_core.plugin_api import Request
from wde_late_interaction.multi_vector import MultiVectorOutputProcessor
from wde_late_interaction.public import OUTPUTS, maxsim


def colbert_score(query: torch.Tensor, document: torch.Tensor) -> float:
    """ColBERT's MaxSim: ``sum_i max_j <q_i, d_j>``, in float64."""
    return float(torch.einsum("id,jd->ij", query.double(), document.double()).amax(dim=1).sum())


def test_maxsim_is_colberts_score_for_every_query_and_document():
    generator = torch.Generator().manual_seed(0)
    queries = [torch.randn(n, 16, generator=generator) for n in (3, 7)]
    documents = [torch.randn(n, 16, generator=generator) for n in (1, 5, 40)]
    scores = maxsim([q.numpy() for q in queries], [d.numpy() for d in documents])
    expected = np.array([[colbert_score(q, d) for d in documents] for q in queries])
    assert scores.shape == (2, 3) and scores.dtype == np.float32
    assert np.abs(scores - expected).max() <= 1e-4


def test_the_output_processor_gives_each_request_its_own_token_vectors():
    vectors = torch.arange(24, dtype=torch.float32).view(6, 4)
    requests = [Request(0, "a", None), Request(1, "b", None)]
    requests[0].token_ids, requests[1].token_ids = [1, 2], [3, 4, 5, 6]
    first, second = MultiVectorOutputProcessor(None).process(requests, {"multi_vector": vectors})
    assert np.array_equal(first, vectors[:2].numpy()) and np.array_equal(second, vectors[2:].numpy())
    assert MultiVectorOutputProcessor.outputs == OUTPUTS == ("multi_vector",)
