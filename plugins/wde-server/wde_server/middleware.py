"""The ASGI layer in front of every route: request ids, API keys and their rate limits, the body read
under a size limit and a timeout, concurrency slots, deadlines, and per-request metrics.

Pure ASGI. A refused request (401, 408, 413, 429) is answered here, before its body is parsed or any
model is touched. An inference request takes a concurrency slot only once its whole body has arrived,
so a client that sends its body slowly holds a socket, never a slot.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid

from wde_server.errors import error_body
from wde_server.keys import KeyRing, retry_after
from wde_server.metrics import Metrics
from wde_server.options import ServerOptions, is_open

ERROR_TYPES = {400: "validation", 401: "unauthorized", 404: "not_found", 408: "timeout", 413: "too_large",
               422: "validation", 429: "overloaded", 499: "cancelled", 500: "backend", 503: "unhealthy",
               504: "deadline"}
UNMATCHED = "<unmatched>"  # the route label of a path no route serves: raw paths never become labels
DEADLINE_HEADER = b"x-request-timeout"


class Refused(Exception):
    """A request answered by the middleware itself: status, message and extra headers."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers or {}


class ClientGone(Exception):
    """The client closed the connection before its body arrived."""


class ServerMiddleware:
    """Request id, auth, rate and payload limits, body timeout, concurrency and metrics for the wrapped app."""

    def __init__(self, app, options: ServerOptions, metrics: Metrics, keys: KeyRing | None,
                 routes: frozenset[str], image_routes: frozenset[str] = frozenset()) -> None:
        self.app, self.options, self.metrics, self.keys, self.routes = app, options, metrics, keys, routes
        self.image_routes = image_routes  # routes whose bodies may carry images: --image-payload-limit
        self.in_flight = 0

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path = scope["path"]
        route = path if path in self.routes else UNMATCHED
        headers = dict(scope["headers"])
        request_id = headers.get(b"x-request-id", b"").decode("latin-1") or uuid.uuid4().hex
        inference = scope["method"] == "POST" and not is_open(path)
        try:
            self.admit(scope, path, headers)
            if inference:
                body = await self.read_body(receive, path)
                scope.setdefault("state", {})["body_bytes"] = len(body)
                receive = replay(body, receive)
                self.take_slot(scope, headers)
        except Refused as refused:
            return await self.answer(send, path, route, request_id, refused)
        except ClientGone:
            return self.record(scope, route, 499, 0.0)
        await self.serve(scope, receive, send, route, request_id, inference)

    async def serve(self, scope, receive, send, route: str, request_id: str, inference: bool) -> None:
        """Run the app, holding a concurrency slot for an inference request; record its status and time."""
        status = {"code": 500}
        start = time.perf_counter()

        async def send_with_id(message) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
                message["headers"] = [*message.get("headers", []), (b"x-request-id", request_id.encode("latin-1"))]
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            if inference:
                self.in_flight -= 1
                self.metrics.in_flight.dec()
            self.record(scope, route, status["code"], time.perf_counter() - start)

    def admit(self, scope, path: str, headers: dict[bytes, bytes]) -> None:
        """Check the key (and its request rate) and the declared body size; ``Refused`` otherwise."""
        if self.keys is not None and self.options.needs_key(path):
            given = headers.get(b"authorization", b"")
            key = self.keys.match(given)
            if key is None:
                what = "missing" if not given else "wrong"
                raise Refused(401, f"API key {what}: send the header 'Authorization: Bearer <key>'")
            scope.setdefault("state", {})["key"] = key
            wait = key.wait("requests_per_minute", 1)
            if wait:
                self.metrics.key_requests.labels(key.name, "429").inc()
                raise Refused(429, f"key {key.name!r} is over its limit of {key.requests_per_minute} requests "
                                   "a minute; retry after the time in Retry-After", {"retry-after": retry_after(wait)})
        length = headers.get(b"content-length")
        limit, flag = self.payload_limit(path)
        if length is not None and length.isdigit() and int(length) > limit:
            raise Refused(413, f"body: {int(length)} bytes exceed the payload limit of {limit} bytes ({flag}); "
                               "split the request")

    def payload_limit(self, path: str) -> tuple[int, str]:
        """The largest body ``path`` takes, and its flag: ``--image-payload-limit`` on routes that take images
        (when a served model reads them), else ``--payload-limit``."""
        if path in self.image_routes and self.options.image_payload_limit > self.options.payload_limit:
            return self.options.image_payload_limit, "--image-payload-limit"
        return self.options.payload_limit, "--payload-limit"

    async def read_body(self, receive, path: str) -> bytes:
        """The whole body, within the route's payload limit and ``--body-timeout`` seconds."""
        (limit, flag), chunks, size = self.payload_limit(path), [], 0
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.options.body_timeout
        while True:
            try:
                message = await asyncio.wait_for(receive(), max(0.0, deadline - loop.time()))
            except asyncio.TimeoutError:
                raise Refused(408, f"body: not complete after {self.options.body_timeout:g} s (--body-timeout); "
                                   f"{size} bytes arrived") from None
            if message["type"] == "http.disconnect":
                raise ClientGone()
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > limit:
                raise Refused(413, f"body: more than {limit} bytes ({flag}); split the request")
            if not message.get("more_body", False):
                return b"".join(chunks)

    def take_slot(self, scope, headers: dict[bytes, bytes]) -> None:
        """Take a concurrency slot (429 when none is free) and set the request's deadline."""
        state = scope.setdefault("state", {})
        state["deadline"] = self.deadline(headers)
        if self.in_flight >= self.options.max_concurrent_requests:
            raise Refused(429, f"the server is serving {self.in_flight} requests, its limit "
                               "(--max-concurrent-requests); retry shortly", {"retry-after": "1"})
        self.in_flight += 1
        self.metrics.in_flight.inc()

    def deadline(self, headers: dict[bytes, bytes]) -> float | None:
        """``time.monotonic()`` by which the request must be answered: ``X-Request-Timeout`` (seconds) or
        ``--request-timeout``, whichever is sooner; ``None`` when neither is set."""
        limits = [self.options.request_timeout] if self.options.request_timeout else []
        given = headers.get(DEADLINE_HEADER)
        if given is not None:
            try:
                seconds = float(given)
            except ValueError:
                seconds = -1.0
            if not 0 < seconds < 1e9:
                raise Refused(400, f"header X-Request-Timeout: {given.decode('latin-1')!r} is not a positive "
                                   "number of seconds")
            limits.append(seconds)
        return time.monotonic() + min(limits) if limits else None

    async def answer(self, send, path: str, route: str, request_id: str, refused: Refused) -> None:
        """Send an error response from the middleware itself (closing the connection after a body error)."""
        body = json.dumps(error_body(path, refused.status, refused.message)).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                   (b"x-request-id", request_id.encode("latin-1"))]
        headers += [(k.encode(), v.encode()) for k, v in refused.headers.items()]
        if refused.status in (408, 413):
            headers.append((b"connection", b"close"))  # the rest of the body is never read
        await send({"type": "http.response.start", "status": refused.status, "headers": headers})
        await send({"type": "http.response.body", "body": body})
        self.metrics.requests.labels("", route, str(refused.status)).inc()

    def record(self, scope, route: str, status: int, seconds: float) -> None:
        """Count the request by model, route and status (and by key name); time it end to end."""
        state = scope.get("state", {})
        model = state.get("model_name", "")
        self.metrics.requests.labels(model, route, str(status)).inc()
        if status >= 400:
            self.metrics.failures.labels(model, ERROR_TYPES.get(status, "server_error" if status >= 500
                                                                else "client_error")).inc()
        if status in (499, 504):
            self.metrics.cancelled.labels(model, "disconnect" if status == 499 else "deadline").inc()
        if "key" in state:
            self.metrics.key_requests.labels(state["key"].name, str(status)).inc()
        if model:
            self.metrics.phases["total"].labels(model).observe(seconds)


def replay(body: bytes, receive):
    """A ``receive`` that gives the already read ``body`` once, then waits on the connection (disconnects)."""
    given = False

    async def replayed():
        nonlocal given
        if given:
            return await receive()
        given = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replayed
