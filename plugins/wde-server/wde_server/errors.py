"""Errors as each API family shapes them: OpenAI-style ``{"error": {...}}`` and TEI's ``{"error", "error_type"}``."""

from __future__ import annotations

from typing import Any

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

# TEI's own routes answer in TEI's error shape; every other route in the OpenAI shape
TEI_PATHS = frozenset({"/embed", "/embed_sparse", "/embed_all", "/rerank", "/predict", "/similarity",
                       "/tokenize", "/decode", "/info"})
TEI_TYPES = {400: "Validation", 401: "Unauthorized", 404: "Validation", 408: "Validation", 413: "Validation",
             422: "Validation", 429: "Overloaded", 499: "Cancelled", 500: "Backend", 503: "Unhealthy", 504: "Timeout"}
OPENAI_TYPES = {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error",
                408: "timeout_error", 413: "invalid_request_error", 422: "invalid_request_error",
                429: "rate_limit_error", 499: "cancelled", 500: "internal_server_error", 503: "service_unavailable",
                504: "timeout_error"}


class ApiError(Exception):
    """An error answered to the client: status, message and the request field it concerns."""

    def __init__(self, status: int, message: str, *, param: str | None = None, code: str | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.code, self.headers = status, message, param, code, headers


def error_body(path: str, status: int, message: str, param: str | None = None, code: str | None = None) -> dict:
    """The JSON body of an error on ``path``, in that route's API family's shape."""
    if path in TEI_PATHS:
        return {"error": message, "error_type": TEI_TYPES.get(status, "Validation")}
    return {"error": {"message": message, "type": OPENAI_TYPES.get(status, "invalid_request_error"),
                      "param": param, "code": code or status}}


def error_response(path: str, error: ApiError) -> JSONResponse:
    """A JSON error response for ``error`` on ``path`` (TEI answers every validation error with 422)."""
    status = 422 if error.status == 400 and path in TEI_PATHS else error.status
    return JSONResponse(error_body(path, status, error.message, error.param, error.code),
                        status_code=status, headers=error.headers)


def validation_status(path: str) -> int:
    """Schema errors: 422 on TEI routes (as TEI), 400 elsewhere (as OpenAI and vLLM)."""
    return 422 if path in TEI_PATHS else 400


def field_name(location: tuple[Any, ...], *, sent_key: bool = False) -> str:
    """``("body", "input", 3)`` -> ``"input[3]"``; ``("body",)`` -> ``"body"``. Union members' tags
    (``str``, ``list[int]``, ``a list of strings``) are dropped; ``sent_key``: the last part is a key the
    client sent (an unknown field), kept as sent, lone surrogates escaped."""
    from wde_server.schemas.unions import is_tag

    last = len(location) - 1
    parts = [p for i, p in enumerate(location) if p != "body" and (not is_tag(p) or (sent_key and i == last))]
    parts = [p if isinstance(p, int) else str(p).encode("utf-8", "backslashreplace").decode() for p in parts]
    parts = parts or ["body"]
    name = str(parts[0])
    for part in parts[1:]:
        name += f"[{part}]" if isinstance(part, int) else f".{part}"
    return name


def install_error_handlers(app) -> None:
    """Answer ``ApiError``, schema and HTTP errors in each route's API family's shape."""
    @app.exception_handler(ApiError)
    async def api_error(request: Request, exc: ApiError) -> JSONResponse:
        return error_response(request.url.path, exc)

    @app.exception_handler(RequestValidationError)
    async def schema_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        from wde_server.schemas import SURROGATE, lone_surrogate
        from wde_server.schemas.unions import pick_error

        first = pick_error([{**e, "loc": tuple(e.get("loc", ("body",)))} for e in exc.errors()])
        name = field_name(first["loc"], sent_key=first.get("type") == "extra_forbidden")
        message = f"{name}: {first.get('msg', 'invalid')}"
        where = lone_surrogate(first["input"]) if isinstance(first.get("input"), str) else None
        if first.get("type") == "string_unicode" and where:  # a key sent with a lone surrogate
            message = f"{name}: a key {SURROGATE.format(where=where)}"
        if first.get("type") in ("model_attributes_type", "dict_type") and name == "body":
            message = "body: expected a JSON object (send it with Content-Type: application/json)"
        if first.get("type") == "json_invalid":
            name, message = "body", f"body: invalid JSON ({first.get('ctx', {}).get('error', 'malformed')})"
        status = validation_status(request.url.path)
        return error_response(request.url.path, ApiError(status, message, param=name))

    @app.exception_handler(Exception)
    async def failed(request: Request, exc: Exception) -> JSONResponse:
        # a failed batch fails only the requests it carried; the server keeps serving
        return error_response(request.url.path, ApiError(500, f"inference failed: {type(exc).__name__}: {exc}"))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return error_response(request.url.path, ApiError(exc.status_code, str(exc.detail)))
