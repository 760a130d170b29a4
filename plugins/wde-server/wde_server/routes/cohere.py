"""Cohere's ``/v2/embed`` (texts and images); Cohere v1/v2 and Jina ``/v1/rerank``, ``/v2/rerank``."""

from __future__ import annotations

import uuid

from fastapi import APIRouter, Request

from wde_core.plugin_api import EmbedOptions
from wde_server.calls import Timing, embed_call, is_small, run
from wde_server.encoding import MULTI_VECTOR_TYPES, by_type
from wde_server.errors import ApiError
from wde_server.images import DATA_URL, check_payload, cohere_inputs, refuse_images, rerank_prepared
from wde_server.models import ServedModel
from wde_server.routes.common import answer, check_batch, check_dimensions, model_for
from wde_server.schemas.cohere import (BilledUnits, CohereEmbedRequest, CohereEmbedResponse, Meta, RerankRequest,
                                       RerankResponse, RerankResult, RerankUsage)

router = APIRouter(tags=["Cohere and Jina"])

# Cohere's input types and the prompt names sentence-transformers models use for them, in order of preference
PROMPT_NAMES = {"search_query": ("search_query", "query"),
                "search_document": ("search_document", "document", "passage", "doc"),
                "classification": ("classification",), "clustering": ("clustering",), "image": ()}
TRUNCATE = {"NONE": "error", "START": "start", "END": "end"}


def prompt_for_input_type(model: ServedModel, input_type: str | None) -> str | None:
    """The model's prompt name for a Cohere ``input_type`` (``search_query`` -> ``query``), or ``None``."""
    if input_type is None:
        return None
    return next((name for name in PROMPT_NAMES[input_type] if name in model.settings.prompts), None)


@router.post("/v2/embed", response_model=CohereEmbedResponse)
async def embed(body: CohereEmbedRequest, request: Request):
    """Embed texts, images (data URLs) or inputs of one text or image part each, or of a text and an image for a VLM
    embedder (Cohere embed v2): float, base64, int8/uint8 (calibrated) and binary/ubinary types; wde's multi_vector
    and multi_vector_base64 types: every token's vector (ColQwen2, ColPali; bge-m3's ColBERT)."""
    model = model_for(request, body.model, "/v2/embed")
    inputs = cohere_inputs(body, pairs=model.reads_pairs)
    check_batch(request, inputs.checked(), inputs.name)
    check_payload(request, bool(inputs.images))
    refuse_images(model, inputs)
    check_dimensions(model, body.output_dimension, "output_dimension")
    outputs = embed_outputs(model, body.embedding_types, body.output_dimension)
    if {"int8", "uint8"} & set(body.embedding_types) and model.ranges is None:
        raise ApiError(400, "embedding_types: int8 and uint8 need calibration ranges; start the server with "
                            "--calibration FILE (texts like the ones you will embed) to enable them",
                       param="embedding_types")
    timing = Timing()
    prepare = embed_call(model, inputs.items, truncate=TRUNCATE[body.truncate], field_name=inputs.name,
                         options=EmbedOptions(dimensions=body.output_dimension, output=outputs), output=outputs,
                         prompt_name=prompt_for_input_type(model, body.input_type), where=inputs.where,
                         max_pixels=request.app.state.options.max_request_pixels)
    per_token = (model.hidden_size or 0) if model.late_output in outputs else 0
    results = await run(model, prepare, timing, inline=is_small(inputs.items), request=request,
                        floats_per_token=per_token)
    embeddings = by_type(results.get("dense"), body.embedding_types, model.ranges, results.get(model.late_output))
    billed = BilledUnits(input_tokens=timing.tokens, images=inputs.images or None)
    response = CohereEmbedResponse(id=uuid.uuid4().hex, embeddings=embeddings,
                                   texts=inputs.texts if body.images is None else None, meta=Meta(billed_units=billed))
    return answer(request, response, timing, model)


def embed_outputs(model: ServedModel, types: list[str], dimension: int | None) -> tuple[str, ...]:
    """The engine outputs ``embedding_types`` ask for: the pooled vector for Cohere's types, every token's vector
    for wde's ``multi_vector`` types; 400 naming ``embedding_types`` for types the model cannot give."""
    multi = [kind for kind in types if kind in MULTI_VECTOR_TYPES]
    pooled = [kind for kind in types if kind not in MULTI_VECTOR_TYPES]
    if not types:
        raise ApiError(400, "embedding_types: empty; ask for at least one type", param="embedding_types")
    if pooled and "dense" not in model.outputs:
        raise ApiError(400, f"embedding_types: model {model.name!r} gives a vector per token (late interaction), no "
                            f"pooled vector for {pooled[0]!r}; ask for {' or '.join(map(repr, MULTI_VECTOR_TYPES))}",
                       param="embedding_types")
    if multi and model.late_output is None:
        raise ApiError(400, f"embedding_types: {multi[0]!r} is every token's vector, which model {model.name!r} does "
                            "not give (late-interaction models do: ColQwen2, ColPali, bge-m3's ColBERT vectors); ask "
                            "for float, base64, int8, uint8, binary or ubinary", param="embedding_types")
    if dimension is not None and "dense" not in model.outputs:
        raise ApiError(400, f"output_dimension: the token vectors of model {model.name!r} are not Matryoshka-trained; "
                            "leave output_dimension unset", param="output_dimension")
    return ("dense",) * bool(pooled) + (model.late_output,) * bool(multi)


@router.post("/v1/rerank", response_model=RerankResponse)
async def rerank_v1(body: RerankRequest, request: Request):
    """Rerank documents against a query (Cohere v1 and Jina shapes); long documents are truncated."""
    return await rerank(body, request, "/v1/rerank")


@router.post("/v2/rerank", response_model=RerankResponse)
async def rerank_v2(body: RerankRequest, request: Request):
    """Rerank documents against a query (Cohere v2 shape); long documents are truncated."""
    return await rerank(body, request, "/v2/rerank")


async def rerank(body: RerankRequest, request: Request, route: str):
    """Score every document with the model's cross-encoder; results best first, ``top_n`` kept."""
    model = model_for(request, body.model, route)
    documents = [d if isinstance(d, str) else d.text for d in body.documents]
    check_payload(request, model.reads_images and any(d.startswith(DATA_URL) for d in [body.query, *documents]))
    if documents:
        check_batch(request, documents, "documents")
    timing = Timing()

    def prepare():
        cut = documents if body.max_tokens_per_doc is None else [
            d if d.startswith(DATA_URL) else first_tokens(model, d, body.max_tokens_per_doc) for d in documents]
        return rerank_prepared(model, body.query, cut, "documents", request.app.state.options.max_request_pixels,
                               top_n=body.top_n, truncate=True)

    ranked = await run(model, prepare, timing, request=request)
    results = [RerankResult(index=r["index"], relevance_score=r["score"],
                            document={"text": documents[r["index"]]} if body.return_documents else None)
               for r in ranked]
    response = RerankResponse(id=uuid.uuid4().hex, model=model.name, results=results,
                              usage=RerankUsage(prompt_tokens=timing.tokens, total_tokens=timing.tokens),
                              meta=Meta(billed_units=BilledUnits(search_units=1)))
    return answer(request, response, timing, model)


def first_tokens(model: ServedModel, text: str, n: int) -> str:
    """``text`` cut after its first ``n`` tokens (at the character where token ``n`` ends)."""
    offsets = model.hf_tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
    return text if len(offsets) <= n else text[:offsets[n - 1][1]]
