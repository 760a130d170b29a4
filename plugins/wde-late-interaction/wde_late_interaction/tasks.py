"""The ``late_interaction`` task of multi-vector models (ColQwen2, ColPali): MaxSim scores between queries and documents
(page images or texts), each side encoded in the same call, and a query's documents ranked by them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from wde_core.plugin_api import Call, EmbedOptions
from wde_late_interaction.multi_vector import OUTPUTS, maxsim


def multi_vector_scores(engine, queries: str | Sequence[str], documents: Sequence[Any], *,
                        truncate: bool = True) -> Any:
    """MaxSim scores ``[len(queries), len(documents)]`` float32 (a single query: ``[len(documents)]``): for each
    query token its best inner product with a document token, summed over the query (ColPali's ``score_retrieval``).
    ``documents``: page images (PIL images, paths, bytes, ``{"image": ...}``) or texts; ``truncate`` cuts long
    queries (pages are never cut)."""
    single = isinstance(queries, str)
    query_list = [queries] if single else _query_list(queries)
    requests = _requests(engine, query_list, documents, truncate)

    def collect(results: list) -> np.ndarray:
        scores = maxsim(results[:len(query_list)], results[len(query_list):])
        return scores[0] if single else scores

    return Call(requests, collect)


def multi_vector_rerank(engine, query: str, documents: Sequence[Any], *, top_n: int | None = None,
                        truncate: bool = True) -> Any:
    """``documents`` ranked by their MaxSim score against ``query``: ``[{"index", "score"}]``, best first (ties in
    input order), the best ``top_n`` only if given."""
    if not isinstance(query, str):
        raise TypeError(f"query: expected a str, got {type(query).__name__}")
    if top_n is not None and (not isinstance(top_n, int) or isinstance(top_n, bool) or top_n < 1):
        raise ValueError(f"top_n={top_n!r}: expected a positive integer or None")
    scored = multi_vector_scores(engine, query, documents, truncate=truncate)

    def collect(results: list) -> list[dict]:
        scores = scored.collect(results)
        order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))[:top_n]
        return [{"index": i, "score": float(scores[i])} for i in order]

    return Call(scored.requests, collect)


def _query_list(queries: Any) -> list[str]:
    """``queries`` as a list of str, or a ``TypeError``/``ValueError`` naming the bad one."""
    if not isinstance(queries, Sequence) or isinstance(queries, (bytes, dict)):
        raise TypeError(f"queries: expected a str or a list of str, got {type(queries).__name__}")
    if len(queries) == 0:
        raise ValueError("queries: got an empty list; pass at least one query")
    for i, query in enumerate(queries):
        if not isinstance(query, str):
            raise TypeError(f"queries[{i}]: expected a str, got {type(query).__name__}")
    return list(queries)


def _requests(engine, queries: list[str], documents: Any, truncate: bool) -> list:
    """The queries' requests, then the documents' (indexed after them), tokenized."""
    if isinstance(documents, (str, bytes, dict)) or not isinstance(documents, Sequence):
        raise TypeError(f"documents: expected a list of page images or texts, got {type(documents).__name__}")
    if len(documents) == 0:
        raise ValueError("documents: got an empty list; pass at least one page or text")
    if not isinstance(truncate, bool):
        raise ValueError(f"truncate={truncate!r}: expected True or False")
    try:
        requests = engine.input_processor.process([*queries, *documents], options=EmbedOptions(output=OUTPUTS))
        engine.tokenizer.tokenize(requests, truncate=truncate)
    except (TypeError, ValueError) as exc:  # name the document, not its place in the joined list
        raise type(exc)(_renamed(str(exc), len(queries))) from None
    return requests


def _renamed(message: str, queries: int) -> str:
    """``"input 5: ..."`` -> ``"documents[2]: ..."`` when input 5 is the third document."""
    if message.startswith("input "):
        number, _, rest = message[len("input "):].partition(":")
        if number.isdigit():
            index = int(number)
            return (f"queries[{index}]:" if index < queries else f"documents[{index - queries}]:") + rest
    return message
