"""The ``rerank`` and ``classify`` tasks' front end: ``Engine.score``, ``Engine.rerank``, ``Engine.classify``.

The core knows these tasks only by name; a plugin's workflow supplies the input processor (pairs or
texts), the pair tokenizer and the output processor (scores, label probabilities).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from wde_core.request import Request, ScoreOptions


class ScoringTasks:
    """Methods of :class:`wde_core.Engine` for cross-encoders (rerank) and classifiers (classify)."""

    def score(self, pairs: Sequence[tuple[str, str]], *, raw_scores: bool = False,
              truncate: bool = True) -> np.ndarray:
        """Relevance scores of ``(query, document)`` pairs, float32 ``[n]`` in input order.

        Single-logit models give ``sigmoid(logit)`` (as sentence-transformers' CrossEncoder and TEI
        do) unless the model's config names another activation; ``raw_scores=True`` gives the logits.
        With ``truncate=True`` an over-long pair loses document tokens, never query tokens.
        """
        requests = self.prepare_requests("rerank", "score", pairs, raw_scores=raw_scores, truncate=truncate)
        return np.asarray(self.run(requests), dtype=np.float32)

    def rerank(self, query: str, documents: Sequence[str], *, top_n: int | None = None,
               return_documents: bool = False, raw_scores: bool = False, truncate: bool = True) -> list[dict]:
        """Score ``documents`` against ``query``: ``[{"index", "score"[, "document"]}]``, best first.

        Ties keep input order; ``top_n`` keeps the best N; an empty ``documents`` list gives ``[]``.
        """
        self._require_task("rerank", "rerank")
        check_rerank_arguments(query, documents, top_n)
        if len(documents) == 0:
            return []
        scores = self.score([(query, d) for d in documents], raw_scores=raw_scores, truncate=truncate)
        return ranked(scores, documents, top_n, return_documents)

    def classify(self, texts: str | Sequence[Any], *, raw_scores: bool = False,
                 truncate: bool = True) -> list[dict[str, float]] | dict[str, float]:
        """Per-label probabilities ``{label: p}`` (labels from ``id2label``) for each text or text pair.

        ``raw_scores=True`` gives the logits instead; a single string (or one pair tuple) gives one dict.
        """
        requests = self.prepare_requests("classify", "classify", texts, raw_scores=raw_scores, truncate=truncate)
        results = self.run(requests)
        return results[0] if isinstance(texts, (str, tuple)) else results

    def prepare_requests(self, task: str, method: str, inputs: Any, *, raw_scores: bool,
                         truncate: bool) -> list[Request]:
        """Validate and tokenize a scoring call's inputs; raises before any batch runs."""
        self._require_task(task, method)
        requests = self.input_processor.process(inputs, options=ScoreOptions(raw_scores=bool(raw_scores)))
        self.tokenizer.tokenize(requests, truncate=truncate)
        return requests


def check_rerank_arguments(query: Any, documents: Any, top_n: Any) -> None:
    """Refuse a non-str query, documents that are not a list, and a ``top_n`` that is not positive."""
    if not isinstance(query, str):
        raise TypeError(f"query: expected a str, got {type(query).__name__}")
    if isinstance(documents, str) or not isinstance(documents, Sequence):
        raise TypeError(f"documents: expected a list of str, got {type(documents).__name__}")
    if top_n is not None and (not isinstance(top_n, int) or isinstance(top_n, bool) or top_n < 1):
        raise ValueError(f"top_n={top_n!r}: expected a positive integer or None")


def ranked(scores: np.ndarray, documents: Sequence[str], top_n: int | None, return_documents: bool) -> list[dict]:
    """``{"index", "score"[, "document"]}`` for the best ``top_n`` documents, ties in input order."""
    order = sorted(range(len(documents)), key=lambda i: (-scores[i], i))[:top_n]
    results = [{"index": i, "score": float(scores[i])} for i in order]
    if return_documents:
        for result in results:
            result["document"] = documents[result["index"]]
    return results
