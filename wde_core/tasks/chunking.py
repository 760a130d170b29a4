"""Long inputs in chunks (vLLM's chunked processing): each piece of an over-long input fits ``max_model_len``,
wrapped in a text's special tokens; the result is the token-count-weighted mean of the pieces' embeddings."""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

import numpy as np

from wde_core.stages.output import collect_embeddings, finish_for_request
from wde_core.stages.request import EmbedOptions, Request
from wde_core.tasks import Call


def chunked_call(context, requests: list[Request], output: str | Sequence[str], *, single: bool) -> Call:
    """Tokenize ``requests`` whole, split the over-long ones, and collect one weighted mean per input."""
    tokenizer, max_len = context.tokenizer, context.pipeline.settings.max_model_len
    tokenizer.tokenize(requests, truncate="chunk")
    pieces: list[Request] = []
    plan: list[tuple[int, int]] = []  # per input: (first piece, number of pieces)
    raw = EmbedOptions(normalize=False, dimensions=None)
    for request in requests:
        chunks = tokenizer.chunk(request, max_len) if request.num_tokens > max_len else [request.token_ids]
        plan.append((len(pieces), len(chunks)))
        for i, ids in enumerate(chunks):
            types = None if request.token_type_ids is None else [0] * len(ids)
            prompt_len = min(request.prompt_len, len(ids) - 1) if i == 0 else 0
            pieces.append(dataclasses.replace(request, index=len(pieces), options=raw, token_ids=list(ids),
                                              token_type_ids=types, prompt_len=prompt_len))
    normalize = context.pipeline.settings.normalize

    def collect(results: list[np.ndarray]) -> Any:
        merged = []
        for request, (first, count) in zip(requests, plan):
            weights = np.array([pieces[first + i].num_tokens for i in range(count)], dtype=np.float64)
            vectors = np.stack(results[first:first + count]).astype(np.float64)
            mean = (weights[:, None] * vectors).sum(0) / weights.sum()
            merged.append(finish_for_request(mean.astype(np.float32), request.options, normalize))
        return collect_embeddings(merged, output, single=single)

    return Call(pieces, collect)
