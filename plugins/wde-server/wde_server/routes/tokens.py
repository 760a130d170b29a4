"""Token classification routes: vLLM's ``/pooling`` with ``task="token_classify"`` (each token's probabilities or
logits) and ``/token_classification`` (the Hugging Face Inference API's payload: entities grouped by transformers'
token-classification pipeline code, as ``Engine.classify_tokens`` returns them); ``?model=`` or the body's
``model`` picks a model."""

from __future__ import annotations

import time
import uuid

import numpy as np
from fastapi import APIRouter, Request

from wde_server.calls import Timing, run
from wde_server.errors import ApiError
from wde_server.routes.common import answer, as_list, check_batch, model_for
from wde_server.schemas.openai import Usage
from wde_server.schemas.tokens import PoolingData, PoolingRequest, TokenClassificationRequest

router = APIRouter(tags=["token classification"])


@router.post("/pooling")
async def pooling(body: PoolingRequest, request: Request):
    """Every token's label probabilities (``use_activation``) or logits, special tokens included (vLLM)."""
    served = model_for(request, body.model, "/pooling")
    texts = as_list(body.input)
    check_batch(request, texts, "input")
    truncate = truncation_of(body.truncate_prompt_tokens, served, request)
    timing = Timing()
    records = await run(served, lambda: served.sync.prepare("classify_tokens", texts, truncate=truncate), timing,
                        request=request, floats_per_token=max(1, len(served.id2label)))  # --max-output-floats
    data = [PoolingData(index=i, data=per_token(r["logits"], body.use_activation).tolist())
            for i, r in enumerate(records)]
    return answer(request, {"id": f"pool-{uuid.uuid4().hex}", "object": "list", "created": int(time.time()),
                            "model": served.name, "data": [d.model_dump() for d in data],
                            "usage": Usage(prompt_tokens=timing.tokens, total_tokens=timing.tokens).model_dump()},
                  timing, served)


def truncation_of(tokens: int | None, served, request: Request) -> bool:
    """vLLM's ``truncate_prompt_tokens``: ``-1`` or the model's limit cut there; other values are refused (wde
    cuts only at the model's limit); ``None`` follows ``--auto-truncate``."""
    if tokens is None:
        return request.app.state.options.auto_truncate
    if tokens not in (-1, served.max_model_len):
        raise ApiError(400, f"truncate_prompt_tokens={tokens}: wde cuts at the model's limit only; send -1 or "
                            f"{served.max_model_len}", param="truncate_prompt_tokens")
    return True


def per_token(logits: np.ndarray, activation: bool) -> np.ndarray:
    """Each row's softmax (``activation``) or the logits as they are."""
    if not activation:
        return logits
    shifted = np.exp(logits - logits.max(axis=1, keepdims=True))
    return shifted / shifted.sum(axis=1, keepdims=True)


@router.post("/token_classification")
async def token_classification(body: TokenClassificationRequest, request: Request, model: str | None = None):
    """Entities of each input (the Inference API's token-classification task): ``entity_group`` (``entity`` with
    ``aggregation_strategy="none"``), ``score``, ``word``, ``start``, ``end``."""
    served = model_for(request, model, "/token_classification")
    texts = as_list(body.inputs)
    check_batch(request, texts, "inputs", 422)
    options = body.parameters
    truncate = request.app.state.options.auto_truncate if body.truncate is None else body.truncate
    timing = Timing()
    grouped = await run(served, lambda: served.sync.prepare(
        "classify_tokens", texts, aggregation=options.aggregation_strategy, stride=options.stride,
        ignore_labels=options.ignore_labels, truncate=None if options.stride is not None else truncate),
        timing, request=request)
    # classify_tokens gives the entities with Python numbers already
    return answer(request, grouped[0] if isinstance(body.inputs, str) else grouped, timing, served)
