"""The ``rerank`` and ``classify`` tasks (``score``, ``rerank``, ``classify``): the core knows only their front
ends; a plugin's workflow supplies the input processor, pair tokenizer, head and output processor."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from wde_core.stages.request import ScoreOptions, as_image_input
from wde_core.tasks import Call, long_input_policy


def score(context, pairs: Sequence[tuple[str, str]], *, raw_scores: bool = False,
          truncate: bool | None = None) -> Any:
    """Relevance scores of ``(query, document)`` pairs (the ``rerank`` task), float32 ``[n]``: ``sigmoid(logit)``
    unless the config names another activation, the logits with ``raw_scores=True``. ``truncate=True`` cuts
    documents, never queries."""
    requests = _scoring_requests(context, pairs, raw_scores, truncate)
    return Call(requests, lambda results: np.asarray(results, dtype=np.float32))


def rerank(context, query: Any, documents: Sequence[Any], *, top_n: int | None = None,
           return_documents: bool = False, raw_scores: bool = False, truncate: bool | None = None) -> Any:
    """Score ``documents`` against ``query`` (the ``rerank`` task): ``[{"index", "score"[, "document"]}]``, best
    first (ties in input order), the best ``top_n`` only if given. A reranker that reads images takes an image or a
    ``{"text", "image"}`` dict on either side; a text cross-encoder refuses them, naming the field."""
    check_rerank_arguments(query, documents, top_n)
    if len(documents) == 0:
        return Call([], lambda results: [])
    requests = _scoring_requests(context, [(query, d) for d in documents], raw_scores, truncate)
    return Call(requests, lambda results: ranked(np.asarray(results, dtype=np.float32), documents, top_n,
                                                 return_documents))


def classify(context, texts: str | Sequence[Any], *, raw_scores: bool = False, truncate: bool | None = None) -> Any:
    """Per-label probabilities ``{label: p}`` (the ``classify`` task; from ``id2label``) for each text or text pair
    (the logits with ``raw_scores=True``); a single string or pair gives one dict."""
    requests = _scoring_requests(context, texts, raw_scores, truncate)
    single = isinstance(texts, (str, tuple))
    return Call(requests, lambda results: results[0] if single else results)


def _scoring_requests(context, inputs: Any, raw_scores: bool, truncate: bool | None) -> list:
    policy = long_input_policy(context, truncate, chunk_ok=False)
    requests = context.input_processor.process(inputs, options=ScoreOptions(raw_scores=bool(raw_scores)))
    context.tokenizer.tokenize(requests, truncate=policy)
    return requests


def check_rerank_arguments(query: Any, documents: Any, top_n: Any) -> None:
    """Refuse a query that is neither a str nor an image (or a text + image dict: the model's input processor says
    whether it reads them), documents that are not a list, and a ``top_n`` that is not positive."""
    if not isinstance(query, (str, dict)) and as_image_input(query) is None:
        raise TypeError(f"query: expected a str (or an image, for a reranker that reads images), got "
                        f"{type(query).__name__}")
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
