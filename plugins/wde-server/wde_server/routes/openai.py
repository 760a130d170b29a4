"""OpenAI's (and Jina's, with images) ``/v1/embeddings`` (with wde's late chunking) and ``/v1/models``; vLLM's
``/score`` and ``/classify``."""

from __future__ import annotations

import re
import time
import uuid
from typing import Any, Callable, Sequence

import numpy as np
from fastapi import APIRouter, Request
from fastapi.responses import Response

from wde_core.plugin_api import Call, EmbedOptions, late_chunk_spans
from wde_server.calls import Timing, classify_call, embed_call, is_small, run, score_call
from wde_server.encoding import to_base64
from wde_server.errors import ApiError
from wde_server.images import check_payload, jina_inputs, refuse_images
from wde_server.models import ServedModel
from wde_server.routes.common import answer, as_list, check_batch, check_dimensions, model_for
from wde_server.schemas.openai import (ClassifyData, ClassifyRequest, ClassifyResponse, Embedding, EmbeddingRequest,
                                       EmbeddingResponse, ModelCard, ModelList, ScoreData, ScoreRequest,
                                       ScoreResponse, Usage)

router = APIRouter(tags=["OpenAI and vLLM"])


@router.post("/v1/embeddings", response_model=EmbeddingResponse)
async def embeddings(body: EmbeddingRequest, request: Request):
    """Embed texts or token-id lists (OpenAI embeddings API), or texts and images (Jina: ``{"text": ...}``,
    ``{"image": ...}``; both in one item for a VLM embedder); ``dimensions`` cuts Matryoshka vectors;
    ``late_chunks``: a vector per chunk of each text."""
    model = model_for(request, body.model, "/v1/embeddings")
    inputs = jina_inputs(as_list(body.input), pairs=model.reads_pairs)
    check_batch(request, inputs.checked(), "input")
    check_payload(request, bool(inputs.images))
    refuse_images(model, inputs)
    check_dimensions(model, body.dimensions, "dimensions")
    if body.late_chunks is not None or body.late_overlap is not None:
        return await late_embeddings(body, request, model, inputs.items)
    timing = Timing()
    policy = "end" if request.app.state.options.auto_truncate else "error"
    prepare = embed_call(model, inputs.items, truncate=policy, field_name="input",
                         options=EmbedOptions(dimensions=body.dimensions), where=inputs.where,
                         max_pixels=request.app.state.options.max_request_pixels)
    vectors = await run(model, prepare, timing, inline=is_small(inputs.items), request=request)
    encode = to_base64 if body.encoding_format == "base64" else np.ndarray.tolist
    data = [Embedding(index=i, embedding=encode(v)) for i, v in enumerate(vectors)]
    usage = Usage(prompt_tokens=timing.tokens, total_tokens=timing.tokens)
    return answer(request, EmbeddingResponse(data=data, model=model.name, usage=usage), timing, model)


async def late_embeddings(body: EmbeddingRequest, request: Request, model: ServedModel,
                          items: list) -> Response:
    """Late chunking (``late_chunks``): one embedding per chunk of each text, in order, each with its input's
    index and its character span; ``late_chunks`` is a rule, or one list of spans per input (a single list of
    spans for a single input)."""
    if body.late_chunks is None:
        raise ApiError(400, "late_overlap: goes with late_chunks; add late_chunks or drop late_overlap",
                       param="late_overlap")
    if not all(isinstance(item, str) for item in items):
        raise ApiError(400, "input: late chunking (late_chunks) reads texts only, not token ids or images",
                       param="input")
    chunks, texts = body.late_chunks, items
    if isinstance(chunks, list) and chunks and chunks[0] and isinstance(chunks[0][0], int):  # one input's spans
        if len(items) != 1:
            raise ApiError(400, f"late_chunks: one list of spans for {len(items)} inputs; send a list of spans per "
                                "input", param="late_chunks")
        texts = items[0]
    timing = Timing()
    prepare = late_embed_call(model, texts, chunks, overlap=body.late_overlap, dimensions=body.dimensions)
    results = await run(model, prepare, timing, request=request)
    encode = to_base64 if body.encoding_format == "base64" else np.ndarray.tolist
    flat = [(i, vector, span) for i, (vectors, spans) in enumerate(results) for vector, span in zip(vectors, spans)]
    data = [Embedding(index=k, embedding=encode(vector), input_index=i, span=list(span))
            for k, (i, vector, span) in enumerate(flat)]
    usage = Usage(prompt_tokens=timing.tokens, total_tokens=timing.tokens)
    return answer(request, EmbeddingResponse(data=data, model=model.name, usage=usage), timing, model)


def late_embed_call(model: ServedModel, texts: str | Sequence[str], chunks: Any, *, overlap: int | None,
                    dimensions: int | None) -> Callable[[], Call]:
    """A prepare function for late chunking (``late_chunks``): per text, its chunks' vectors and their spans;
    a refusal names its field (``param``)."""
    def prepare() -> Call:
        try:
            spans = late_chunk_spans(model.sync, texts, chunks, name="late_chunks")
            call = model.sync.prepare("encode", texts, truncate="late", chunks=spans, late_overlap=overlap,
                                      dimensions=dimensions)
        except (ValueError, TypeError) as exc:
            field = re.match(r"late_chunks|late_overlap|dimensions", str(exc))
            raise ApiError(400, str(exc), param=field and field.group()) from None
        if isinstance(texts, str):
            return Call(call.requests, lambda results: [(call.collect(results), spans)])
        return Call(call.requests, lambda results: list(zip(call.collect(results), spans)))

    return prepare


@router.get("/v1/models", response_model=ModelList)
async def models(request: Request):
    """The served models."""
    created = request.app.state.started
    return ModelList(data=[ModelCard(id=m.name, created=created, task=m.task, max_model_len=m.max_model_len)
                           for m in request.app.state.models])


@router.post("/score", response_model=ScoreResponse)
async def score(body: ScoreRequest, request: Request):
    """Score ``text_1`` against ``text_2`` (vLLM): a cross-encoder's scores, or an embedder's cosine."""
    model = model_for(request, body.model, "/score")
    pairs = score_pairs(body.text_1, body.text_2)
    check_batch(request, [q for q, _ in pairs] + [d for _, d in pairs], "text_2")
    truncate = request.app.state.options.auto_truncate if body.truncate is None else body.truncate
    timing = Timing()
    if model.task == "embed":
        scores = await cosine_scores(model, pairs, "error" if not truncate else "end", timing, request)
    else:
        scores = await run(model, score_call(model, pairs, truncate=truncate), timing, request=request)
    data = [ScoreData(index=i, score=float(s)) for i, s in enumerate(scores)]
    return answer(request, ScoreResponse(id=f"score-{uuid.uuid4().hex}", created=int(time.time()), model=model.name,
                                         data=data, usage=Usage(prompt_tokens=timing.tokens,
                                                                total_tokens=timing.tokens)), timing, model)


def score_pairs(text_1: str | list[str], text_2: str | list[str]) -> list[tuple[str, str]]:
    """vLLM's pairing: one ``text_1`` with every ``text_2``, else ``text_1[i]`` with ``text_2[i]``."""
    firsts, seconds = as_list(text_1), as_list(text_2)
    if len(firsts) == 1:
        firsts = firsts * len(seconds)
    if len(firsts) != len(seconds):
        raise ApiError(400, f"text_1 has {len(firsts)} texts and text_2 {len(seconds)}: pass one text_1, or "
                            "as many as text_2", param="text_1")
    return list(zip(firsts, seconds))


async def cosine_scores(model, pairs: list[tuple[str, str]], policy: str, timing: Timing,
                        request: Request) -> np.ndarray:
    """Cosine similarity of each pair's embeddings (normalized), computed in one call."""
    texts = [q for q, _ in pairs] + [d for _, d in pairs]
    vectors = await run(model, embed_call(model, texts, truncate=policy, field_name="text_2",
                                          options=EmbedOptions(normalize=True)), timing,
                        request=request)
    n = len(pairs)
    return np.einsum("ij,ij->i", vectors[:n], vectors[n:])


@router.post("/classify", response_model=ClassifyResponse)
async def classify(body: ClassifyRequest, request: Request):
    """Label texts (vLLM): the top label and every label's probability, in the model's label order."""
    model = model_for(request, body.model, "/classify")
    texts = as_list(body.input)
    check_batch(request, texts, "input")
    truncate = request.app.state.options.auto_truncate if body.truncate is None else body.truncate
    timing = Timing()
    results = await run(model, classify_call(model, texts, truncate=truncate), timing, request=request)
    data = []
    for i, probs in enumerate(results):
        labels = list(probs)
        best = max(labels, key=lambda label: probs[label])
        data.append(ClassifyData(index=i, label=best, probs=[float(probs[x]) for x in labels],
                                 num_classes=len(labels)))
    return answer(request, ClassifyResponse(id=f"classify-{uuid.uuid4().hex}", created=int(time.time()),
                                            model=model.name, data=data,
                                            usage=Usage(prompt_tokens=timing.tokens, total_tokens=timing.tokens)),
                  timing, model)
