"""text-embeddings-inference's routes: ``/embed``, ``/embed_sparse``, ``/embed_all``, ``/rerank``,
``/predict``, ``/similarity``, ``/tokenize``, ``/decode`` and ``/info``; ``?model=`` picks a model."""

from __future__ import annotations

import asyncio

import numpy as np
from fastapi import APIRouter, Request

from wde_core.plugin_api import EmbedOptions
from wde_server.calls import Timing, classify_call, embed_call, is_small, limits_for, run, token_embed_call
from wde_server.errors import ApiError
from wde_server.images import DATA_URL, check_payload, rerank_prepared
from wde_server.routes.common import (answer, as_list, check_batch, model_for, prompt_for, stream_arrays,
                                      truncation)
from wde_server.schemas.tei import (SparseValue, TeiDecodeRequest, TeiEmbedAllRequest, TeiEmbedRequest, TeiInfo,
                                    TeiPrediction, TeiPredictRequest, TeiRank, TeiRerankRequest,
                                    TeiSimilarityRequest, TeiSparseRequest, TeiToken, TeiTokenizeRequest)

router = APIRouter(tags=["text-embeddings-inference"])


@router.post("/embed", response_model=list[list[float]])
async def embed(body: TeiEmbedRequest, request: Request, model: str | None = None):
    """Embed texts or token-id lists; ``normalize`` (default true) and ``dimensions`` as TEI takes them."""
    served = model_for(request, model, "/embed")
    inputs = as_list(body.inputs)
    check_batch(request, inputs, "inputs", 422)
    timing = Timing()
    prepare = embed_call(served, inputs, truncate=truncation(body.truncate, body.truncation_direction, request),
                         field_name="inputs",
                         options=EmbedOptions(normalize=body.normalize, dimensions=body.dimensions),
                         prompt_name=prompt_for(served, body.prompt_name))
    vectors = await run(served, prepare, timing, inline=is_small(inputs), request=request)
    return answer(request, vectors.tolist(), timing, served)


@router.post("/embed_sparse", response_model=list[list[SparseValue]])
async def embed_sparse(body: TeiSparseRequest, request: Request, model: str | None = None):
    """Sparse lexical weights (bge-m3): ``[{index: token_id, value: weight}]`` per input."""
    served = model_for(request, model, "/embed_sparse")
    inputs = as_list(body.inputs)
    check_batch(request, inputs, "inputs", 422)
    timing = Timing()
    prepare = embed_call(served, inputs, truncate=truncation(body.truncate, body.truncation_direction, request),
                         field_name="inputs", options=EmbedOptions(output=("sparse",)),
                         prompt_name=prompt_for(served, body.prompt_name), output="sparse")
    weights = await run(served, prepare, timing, request=request)
    body_out = [[{"index": int(k), "value": float(v)} for k, v in sorted(w.items())] for w in weights]
    return answer(request, body_out, timing, served)


@router.post("/embed_all", response_model=list[list[list[float]]])
async def embed_all(body: TeiEmbedAllRequest, request: Request, model: str | None = None):
    """Every token's vector (late chunking); a model with ColBERT vectors (bge-m3) or late-interaction vectors
    (ColQwen2) returns those."""
    served = model_for(request, model, "/embed_all")
    inputs = as_list(body.inputs)
    check_batch(request, inputs, "inputs", 422)
    policy = truncation(body.truncate, body.truncation_direction, request)
    prompt_name = prompt_for(served, body.prompt_name)
    timing = Timing()
    late = served.late_output
    if late == "multi_vector" and served.reads_images:  # a page as a data:image/... URL
        inputs = [{"image": x} if isinstance(x, str) and x.startswith("data:image/") else x for x in inputs]
    if late is not None:  # bge-m3's ColBERT vectors; a late-interaction model's (ColQwen2) token vectors
        prepare = embed_call(served, inputs, truncate=policy, field_name="inputs", prompt_name=prompt_name,
                             options=EmbedOptions(output=(late,)), output=late)
    else:
        prepare = token_embed_call(served, inputs, truncate=policy, field_name="inputs",
                                   normalize=body.normalize, prompt_name=prompt_name)
    vectors = await run(served, prepare, timing, request=request, floats_per_token=served.hidden_size)
    return stream_arrays(request, vectors, timing, served)


@router.post("/rerank", response_model=list[TeiRank])
async def rerank(body: TeiRerankRequest, request: Request, model: str | None = None):
    """Score ``texts`` against ``query``: ``[{index, score[, text]}]``, best first."""
    served = model_for(request, model, "/rerank")
    check_payload(request, served.reads_images and any(t.startswith(DATA_URL) for t in [body.query, *body.texts]))
    check_batch(request, body.texts, "texts", 422)
    truncate = request.app.state.options.auto_truncate if body.truncate is None else body.truncate
    timing = Timing()
    ranked = await run(served, lambda: rerank_prepared(served, body.query, body.texts, "texts",
                                                       request.app.state.options.max_request_pixels,
                                                       raw_scores=body.raw_scores, truncate=truncate),
                       timing, request=request)
    out = [TeiRank(index=r["index"], score=r["score"], text=body.texts[r["index"]] if body.return_text else None)
           for r in ranked]
    return answer(request, [r.model_dump(exclude_none=True) for r in out], timing, served)


@router.post("/predict", response_model=list[TeiPrediction] | list[list[TeiPrediction]])
async def predict(body: TeiPredictRequest, request: Request, model: str | None = None):
    """Classify a text, a ``[text, text_pair]``, or a list of them: labels by score, best first."""
    served = model_for(request, model, "/predict")
    single, inputs = predict_inputs(body.inputs)
    check_batch(request, inputs, "inputs", 422)
    truncate = request.app.state.options.auto_truncate if body.truncate is None else body.truncate
    timing = Timing()
    results = await run(served, classify_call(served, inputs, truncate=truncate, raw_scores=body.raw_scores), timing,
                        request=request)
    ranked = [sorted(({"label": k, "score": float(v)} for k, v in r.items()), key=lambda x: -x["score"])
              for r in results]
    return answer(request, ranked[0] if single else ranked, timing, served)


def predict_inputs(inputs) -> tuple[bool, list]:
    """TEI's reading: a string or a two-string list is one input (text, or pair); else a list of them."""
    if isinstance(inputs, str):
        return True, [inputs]
    if len(inputs) == 2 and all(isinstance(x, str) for x in inputs):
        return True, [tuple(inputs)]
    items = []
    for i, item in enumerate(inputs):
        if isinstance(item, list):
            if len(item) != 2:
                raise ApiError(422, f"inputs[{i}]: a pair is [text, text_pair], got {len(item)} strings",
                               param="inputs")
            item = tuple(item)
        items.append(item)
    return False, items


@router.post("/similarity", response_model=list[float])
async def similarity(body: TeiSimilarityRequest, request: Request, model: str | None = None):
    """Cosine similarity of ``source_sentence`` with each of ``sentences``."""
    served = model_for(request, model, "/similarity")
    check_batch(request, [body.inputs.source_sentence, *body.inputs.sentences], "inputs.sentences", 422)
    if not body.inputs.sentences:
        raise ApiError(422, "inputs.sentences: empty; send at least one sentence", param="inputs.sentences")
    timing = Timing()
    prepare = embed_call(served, [body.inputs.source_sentence, *body.inputs.sentences],
                         truncate=truncation(body.truncate, body.truncation_direction, request),
                         field_name="inputs.sentences", options=EmbedOptions(normalize=True),
                         prompt_name=prompt_for(served, body.prompt_name))
    vectors = await run(served, prepare, timing, request=request)
    return answer(request, (vectors[1:] @ vectors[0]).astype(np.float32).tolist(), timing, served)


@router.post("/tokenize", response_model=list[list[TeiToken]])
async def tokenize(body: TeiTokenizeRequest, request: Request, model: str | None = None):
    """Tokens of each input: id, text, whether special, and character offsets (off the event loop; the
    request's tokens count against ``--max-request-tokens`` as an inference request's do)."""
    served = model_for(request, model, "/tokenize")
    texts = as_list(body.inputs)
    check_batch(request, texts, "inputs", 422)
    prompt = served.settings.prompts[prompt_for(served, body.prompt_name)] if body.prompt_name else ""
    encoded = await asyncio.to_thread(served.hf_tokenizer, [prompt + t for t in texts],
                                      add_special_tokens=body.add_special_tokens, return_offsets_mapping=True)
    limits_for(request).check_size(sum(len(ids) for ids in encoded["input_ids"]))
    return await asyncio.to_thread(token_table, served, encoded)


def token_table(served, encoded) -> list[list[dict]]:
    """``/tokenize``'s answer from the tokenizer's ids and offsets."""
    special, out = set(served.hf_tokenizer.all_special_ids), []
    for ids, offsets in zip(encoded["input_ids"], encoded["offset_mapping"]):
        pieces = served.hf_tokenizer.convert_ids_to_tokens(ids)
        out.append([{"id": i, "text": p, "special": i in special, "start": None if i in special else s,
                     "stop": None if i in special else e} for i, p, (s, e) in zip(ids, pieces, offsets)])
    return out


@router.post("/decode", response_model=list[str])
def decode(body: TeiDecodeRequest, request: Request, model: str | None = None):
    """Token ids back to text."""
    served = model_for(request, model, "/decode")
    lists = as_list(body.ids)
    check_batch(request, lists, "ids", 422)
    vocab = len(served.hf_tokenizer)
    for i, ids in enumerate(lists):
        bad = next((t for t in ids if not 0 <= t < vocab), None)
        if bad is not None:
            raise ApiError(422, f"ids[{i}]: token id {bad} is outside the vocabulary (0..{vocab - 1})", param="ids")
    return served.hf_tokenizer.batch_decode(lists, skip_special_tokens=body.skip_special_tokens)


@router.get("/info", response_model=TeiInfo)
async def info(request: Request, model: str | None = None):
    """The served model (``?model=``, else the first) and the server's limits."""
    from wde_server import __version__

    served = model_for(request, model, "/info")
    options = request.app.state.options
    kind = {"embed": "embedding", "rerank": "reranker", "classify": "classifier"}.get(served.task, served.task)
    facts = served.info()
    return TeiInfo(model_id=served.name, model_type={kind: {"pooling": facts["pooling"], "labels": facts["labels"]}},
                   max_concurrent_requests=options.max_concurrent_requests,
                   max_input_length=served.max_model_len, max_batch_tokens=facts["max_batch_tokens"],
                   max_batch_requests=facts["max_batch_requests"], max_client_batch_size=options.max_client_batch_size,
                   auto_truncate=options.auto_truncate, version=__version__,
                   models=[m.info() for m in request.app.state.models])
