"""What every route does: pick the model, check the batch, run the call, answer with timing headers."""

from __future__ import annotations

from typing import Any, Sequence

from fastapi import Request
from fastapi.responses import Response, StreamingResponse
from pydantic import BaseModel

from wde_server.calls import Timing
from wde_server.errors import ApiError
from wde_server.models import ServedModel


def model_for(request: Request, name: str | None, route: str) -> ServedModel:
    """The model the request names (or the default), checked to serve ``route``; labels the metrics."""
    model = request.app.state.models.get(name)
    request.state.model_name = model.name
    model.check_route(route)
    return model


def check_batch(request: Request, items: Sequence[Any], field: str, status: int = 400) -> None:
    """Refuse an empty batch, an empty string in it, or more items than ``--max-client-batch-size``."""
    if len(items) == 0:
        raise ApiError(status, f"{field}: empty; send at least one input", param=field)
    limit = request.app.state.options.max_client_batch_size
    if len(items) > limit:
        raise ApiError(413, f"{field}: {len(items)} inputs exceed the client batch limit of {limit} "
                            "(--max-client-batch-size); split the request", param=field)
    for i, item in enumerate(items):
        if len(item) == 0:
            raise ApiError(status, f"{field}[{i}]: empty {'string' if isinstance(item, str) else 'token list'}",
                           param=field)


def check_dimensions(model: ServedModel, dimension: int | None, field: str) -> None:
    """Refuse a Matryoshka size larger than the model's embeddings (400 naming ``field``)."""
    if dimension is not None and model.hidden_size is not None and dimension > model.hidden_size:
        raise ApiError(400, f"{field}: {dimension} exceeds the model's embedding size {model.hidden_size}", param=field)


def as_list(value: Any) -> list:
    """A single input as a one-item list; a list of token ids (ints) as one input."""
    if isinstance(value, str) or (isinstance(value, list) and value and isinstance(value[0], int)):
        return [value]
    return list(value)


def truncation(truncate: bool | None, direction: str, request: Request) -> str:
    """TEI's ``truncate``/``truncation_direction`` as a policy: ``error``, ``end`` or ``start``."""
    if truncate is None:
        truncate = request.app.state.options.auto_truncate
    if not truncate:
        return "error"
    return "start" if direction.lower() == "left" else "end"


def answer(request: Request, body: BaseModel | Any, timing: Timing, model: ServedModel) -> Response:
    """A JSON response with the timing headers; the request's phases recorded in the metrics."""
    request.app.state.metrics.observe(model.name, timing)
    content = body.model_dump_json(exclude_none=True) if isinstance(body, BaseModel) else _dumps(body)
    return Response(content, media_type="application/json", headers=timing.headers())


def _dumps(body: Any) -> str:
    import json

    return json.dumps(body)


def prompt_for(model: ServedModel, prompt_name: str | None, field: str = "prompt_name") -> str | None:
    """Check a requested prompt name against the model's prompts (400 naming them)."""
    if prompt_name is not None and prompt_name not in model.settings.prompts:
        known = ", ".join(sorted(model.settings.prompts)) or "none"
        raise ApiError(400, f"{field}: {prompt_name!r} is not among the model's prompts ({known})", param=field)
    return prompt_name


def stream_arrays(request: Request, arrays: Sequence[Any], timing: Timing, model: ServedModel) -> StreamingResponse:
    """A JSON list of arrays (``/embed_all``'s token vectors), written one array at a time: the response is
    never held whole in memory."""
    request.app.state.metrics.observe(model.name, timing)

    def chunks():
        for i, array in enumerate(arrays):
            yield ("[" if i == 0 else ",") + _dumps(array.tolist())
        yield "]" if arrays else "[]"

    return StreamingResponse(chunks(), media_type="application/json", headers=timing.headers())
