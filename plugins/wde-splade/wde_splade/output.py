"""The sparse-encoder output processor: ``"sparse"`` as ``{token_id: weight}`` (bge-m3's form), ``"dense"`` as the
vocabulary-sized float32 vector (``SparseEncoder.encode(convert_to_tensor=True).to_dense()``); both keep only the
``max_active_dims`` largest weights (by absolute value, as sentence-transformers' ``select_max_active_dims``)."""

from __future__ import annotations

import numpy as np

from wde_core.plugin_api import EmbeddingOutputProcessor, TokenEmbedOptions, split_tokens


def top_k(vector: np.ndarray, k: int | None) -> np.ndarray:
    """``vector`` with all but its ``k`` largest absolute values set to zero (``None``: unchanged)."""
    if k is None or k >= vector.shape[-1]:
        return vector
    kept = np.zeros_like(vector)
    index = np.argpartition(-np.abs(vector), k - 1)[:k]
    kept[index] = vector[index]
    return kept


def sparse_dict(vector: np.ndarray) -> dict[int, float]:
    """``{token_id: weight}`` of the non-zero weights, by token id."""
    ids = np.flatnonzero(vector)
    return dict(zip(ids.tolist(), vector[ids].tolist()))


class SparseOutputProcessor(EmbeddingOutputProcessor):
    """Serves ``output="sparse"``, ``"dense"`` or both from the model's ``[B, vocab]`` vectors; token vectors for
    ``embed_tokens``. ``normalize`` applies to the dense vector only."""

    outputs = ("sparse", "dense")

    def __init__(self, pipeline) -> None:
        super().__init__(pipeline)
        self.max_active_dims = pipeline.settings.extras["splade"]["max_active_dims"]

    def process(self, requests, pooled) -> list:
        """One result per request: a dict of the outputs it asked for."""
        vectors = pooled.get("sparse", pooled.get("dense"))
        vectors = vectors.numpy() if vectors is not None else None
        tokens = split_tokens(pooled.get("tokens"), [r.num_tokens for r in requests])
        results: list = []
        for i, request in enumerate(requests):
            if isinstance(request.options, TokenEmbedOptions):
                results.append(self.token_vectors(tokens[i], request))
                continue
            vector = top_k(vectors[i], self.max_active_dims)
            result = {"sparse": sparse_dict(vector)} if "sparse" in request.options.output else {}
            if "dense" in request.options.output:
                result["dense"] = self.finish(vector, request)
            results.append(result)
        return results
