"""Scores between bge-m3 outputs, as FlagEmbedding's ``BGEM3FlagModel`` computes them."""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

DEFAULT_WEIGHTS = (0.4, 0.2, 0.4)  # dense, sparse, colbert: FlagEmbedding's weights_for_different_modes


def dense_score(query: np.ndarray, passage: np.ndarray) -> float:
    """Inner product of two dense vectors (their cosine when normalized)."""
    return float(np.dot(query, passage))


def lexical_matching_score(query: Mapping[int, float], passage: Mapping[int, float]) -> float:
    """Sum of weight products over the tokens both lexical-weight dicts contain."""
    return float(sum(weight * passage[token] for token, weight in query.items() if token in passage))


def colbert_score(query: np.ndarray, passage: np.ndarray) -> float:
    """MaxSim: each query vector's best inner product with a passage vector, averaged over the query."""
    return float((query @ passage.T).max(axis=1).sum() / query.shape[0])


def combined_score(query: Mapping[str, object], passage: Mapping[str, object],
                   weights: Sequence[float] = DEFAULT_WEIGHTS) -> float:
    """The weighted mean of the dense, sparse and ColBERT scores of the outputs both sides hold.

    ``query`` and ``passage`` are ``encode(..., output=("dense", "sparse", "colbert"))`` results for one
    text each; ``weights`` are (dense, sparse, colbert), so ``dense+sparse`` is the mean of those two
    weighted by ``weights[0]`` and ``weights[1]``.
    """
    scorers = (("dense", dense_score), ("sparse", lexical_matching_score), ("colbert", colbert_score))
    total = weight_sum = 0.0
    for (name, scorer), weight in zip(scorers, weights):
        if name in query and name in passage:
            total += weight * scorer(query[name], passage[name])
            weight_sum += weight
    if weight_sum == 0:
        raise ValueError("combined_score: the two sides share no output with a non-zero weight")
    return total / weight_sum
