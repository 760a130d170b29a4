"""Multi-vector (late-interaction) outputs: every token's normalized vector per input, as a model's
``multi_vector`` head gives them (ColQwen2, ColPali), and ``maxsim``, the score between two such inputs."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from wde_core.plugin_api import Request, split_tokens

OUTPUTS = ("multi_vector",)  # the model output late-interaction workflows ask for by default


def maxsim(queries: Sequence[np.ndarray], documents: Sequence[np.ndarray]) -> np.ndarray:
    """``[queries, documents]`` float32: for each query token its best inner product with a document token, summed
    over the query's tokens (ColPali's and ColQwen2's ``score_retrieval``)."""
    scores = np.empty((len(queries), len(documents)), dtype=np.float32)
    for j, document in enumerate(documents):
        document = np.asarray(document, dtype=np.float32)
        for i, query in enumerate(queries):
            scores[i, j] = (np.asarray(query, dtype=np.float32) @ document.T).max(axis=1).sum()
    return scores


class MultiVectorOutputProcessor:
    """``[num_tokens, dim]`` float32 per query or page: every token's normalized vector (ColPali's layout)."""

    outputs = OUTPUTS

    def __init__(self, pipeline) -> None:
        pass

    def process(self, requests: list[Request], pooled: dict) -> list:
        """One array per request, in batch order."""
        return split_tokens(pooled["multi_vector"], [r.num_tokens for r in requests])
