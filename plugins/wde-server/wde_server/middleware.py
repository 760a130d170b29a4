"""The ASGI layer in front of every route: request ids, API key, payload and concurrency limits, metrics.

Pure ASGI (no per-request task or body copy for the common case): a refused request (401, 413, 429)
is answered here, before its body is parsed or any model is touched.
"""

from __future__ import annotations

import json
import secrets
import time
import uuid

from wde_server.errors import error_body

ERROR_TYPES = {400: "validation", 401: "unauthorized", 404: "not_found", 413: "too_large", 422: "validation",
               429: "overloaded", 500: "backend", 503: "unhealthy"}
from wde_server.metrics import Metrics
from wde_server.options import OPEN_PATHS, ServerOptions


class ServerMiddleware:
    """Request id, auth, payload limit, concurrency limit and per-request metrics for the wrapped app."""

    def __init__(self, app, options: ServerOptions, metrics: Metrics) -> None:
        self.app, self.options, self.metrics = app, options, metrics
        self.in_flight = 0
        self.expected = f"Bearer {options.api_key}".encode() if options.api_key else None

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path = scope["path"]
        headers = dict(scope["headers"])
        request_id = headers.get(b"x-request-id", b"").decode("latin-1") or uuid.uuid4().hex
        refusal = self.refuse(path, headers)
        if refusal is not None:
            return await self.answer(send, path, request_id, *refusal)
        counted = scope["method"] == "POST" and path not in OPEN_PATHS
        if counted:
            self.in_flight += 1
            self.metrics.in_flight.inc()
        status = {"code": 500}
        start = time.perf_counter()

        async def send_with_headers(message) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
                message["headers"] = [*message.get("headers", []), (b"x-request-id", request_id.encode("latin-1"))]
            await send(message)

        try:
            await self.app(scope, self.limited(receive, path), send_with_headers)
        finally:
            if counted:
                self.in_flight -= 1
                self.metrics.in_flight.dec()
            self.record(scope, path, status["code"], time.perf_counter() - start)

    def refuse(self, path: str, headers: dict[bytes, bytes]) -> tuple[int, str, dict] | None:
        """``(status, message, headers)`` when the request is refused before it runs, else ``None``."""
        if self.expected is not None and self.options.needs_key(path):
            given = headers.get(b"authorization", b"")
            if not secrets.compare_digest(given, self.expected):
                what = "missing" if not given else "wrong"
                return 401, f"API key {what}: send the header 'Authorization: Bearer <key>'", {}
        length = headers.get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.options.payload_limit:
            return 413, (f"body: {int(length)} bytes exceed the payload limit of {self.options.payload_limit} "
                         "bytes (--payload-limit); split the request"), {}
        if path not in OPEN_PATHS and self.in_flight >= self.options.max_concurrent_requests:
            return 429, (f"the server is serving {self.in_flight} requests, its limit "
                         "(--max-concurrent-requests); retry shortly"), {"retry-after": "1"}
        return None

    def limited(self, receive, path: str):
        """``receive`` that refuses a body (sent without a length) once it passes the payload limit."""
        seen = 0
        limit = self.options.payload_limit

        async def receive_limited():
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise PayloadTooLarge(seen, limit)
            return message

        return receive_limited

    async def answer(self, send, path: str, request_id: str, status: int, message: str, extra: dict) -> None:
        """Send an error response from the middleware itself."""
        body = json.dumps(error_body(path, status, message)).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                   (b"x-request-id", request_id.encode("latin-1"))]
        headers += [(k.encode(), v.encode()) for k, v in extra.items()]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})
        self.metrics.requests.labels("", path, str(status)).inc()

    def record(self, scope, path: str, status: int, seconds: float) -> None:
        """Count the request by model, route and status; time it end to end."""
        model = scope.get("state", {}).get("model_name", "")
        self.metrics.requests.labels(model, path, str(status)).inc()
        if status >= 400:
            self.metrics.failures.labels(model, ERROR_TYPES.get(status, "server_error" if status >= 500
                                                                else "client_error")).inc()
        if model:
            self.metrics.phases["total"].labels(model).observe(seconds)


class PayloadTooLarge(Exception):
    """A body sent without ``Content-Length`` grew past the payload limit."""

    def __init__(self, seen: int, limit: int) -> None:
        super().__init__(f"body: more than {limit} bytes (--payload-limit); split the request")
        self.seen, self.limit = seen, limit
