"""The client side of bench_serve.py: bounded loads on an OpenAI ``POST /v1/embeddings`` route on 127.0.0.1.

Three loads, the same for every server:

- ``concurrent_load(url, model, texts, clients=32, batch=1)``: 32 clients, each sending one text per
  request, back to back, until the texts run out (every text is sent once);
- the same with ``clients=4, batch=64``: 4 clients sending batches of 64 texts;
- ``lone_load(url, model, texts)``: one client, one short text per request, one request at a time.

Each load is bounded by its texts (and by a deadline), checks every answer (one 384-float vector per
input) and returns a :class:`LoadResult`: wall time, per-request latencies and token counts.
It uses aiohttp when it is installed (less client CPU on a 2-core machine), else httpx.
"""

from __future__ import annotations

import asyncio
import base64
import math
import time
from dataclasses import dataclass, field

import numpy as np

LOOPBACK = ("127.0.0.1", "localhost", "[::1]")


@dataclass
class LoadResult:
    """What one load measured. ``tokens``: the tokens of the texts answered (counted by the caller's tokenizer)."""

    seconds: float
    latencies: list[float]
    tokens: int
    texts: int
    errors: list[str] = field(default_factory=list)
    embeddings: dict[int, list[list[float]]] = field(default_factory=dict)  # request index -> its vectors

    @property
    def requests_per_s(self) -> float:
        return len(self.latencies) / self.seconds

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds

    def percentile(self, q: float) -> float:
        return percentile(self.latencies, q)


def percentile(values: list[float], q: float) -> float:
    """The ``q``-th percentile (0-100) by linear interpolation between closest ranks (numpy's default)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def _check_url(url: str) -> None:
    host = url.split("://", 1)[-1].split("/", 1)[0].rsplit(":", 1)[0]
    if host not in LOOPBACK:
        raise ValueError(f"{url}: this load generator only sends to the loopback address")


class _Client:
    """One connection pool, aiohttp or httpx, with ``post(json) -> (status, parsed body)``."""

    def __init__(self, url: str, connections: int, timeout: float) -> None:
        _check_url(url)
        self.url = url
        try:
            import aiohttp
        except ImportError:
            aiohttp = None
        if aiohttp is not None:
            self.kind = "aiohttp"
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=connections, force_close=False),
                timeout=aiohttp.ClientTimeout(total=timeout))
        else:
            import httpx

            self.kind = "httpx"
            self._session = httpx.AsyncClient(timeout=timeout, limits=httpx.Limits(
                max_connections=connections, max_keepalive_connections=connections))

    async def post(self, body: dict) -> tuple[int, object]:
        if self.kind == "aiohttp":
            async with self._session.post(self.url, json=body) as response:
                status = response.status
                data = await response.json(content_type=None) if status == 200 else await response.text()
                return status, data
        response = await self._session.post(self.url, json=body)
        return response.status_code, response.json() if response.status_code == 200 else response.text

    async def close(self) -> None:
        if self.kind == "aiohttp":
            await self._session.close()
        else:
            await self._session.aclose()


def _vectors(data: object, expected: int) -> list[list[float]]:
    """The embeddings of an OpenAI answer, in input order; ValueError when the answer is malformed."""
    if not isinstance(data, dict) or not isinstance(data.get("data"), list):
        raise ValueError(f"not an OpenAI embeddings answer: {str(data)[:200]}")
    items = sorted(data["data"], key=lambda item: item.get("index", 0))
    if len(items) != expected:
        raise ValueError(f"{len(items)} embeddings for {expected} inputs")
    vectors = [_decoded(item["embedding"]) for item in items]
    if any(not isinstance(v, (list, np.ndarray)) or len(v) == 0 for v in vectors):
        raise ValueError("an embedding is not a list of floats")
    return vectors


def _decoded(embedding: object) -> object:
    """An ``encoding_format="base64"`` embedding (little-endian float32 bytes) as a float32 array."""
    return np.frombuffer(base64.b64decode(embedding), dtype="<f4") if isinstance(embedding, str) else embedding


async def _run(url: str, model: str, batches: list[list[str]], batch_tokens: list[int], clients: int,
               deadline: float, extra: dict | None, keep: bool) -> LoadResult:
    client = _Client(url, clients, timeout=max(30.0, deadline))
    queue = list(range(len(batches)))
    queue.reverse()
    latencies: list[float] = []
    errors: list[str] = []
    done_tokens = done_texts = 0
    kept: dict[int, list[list[float]]] = {}
    start = time.perf_counter()
    stop_at = start + deadline

    async def worker() -> None:
        nonlocal done_tokens, done_texts
        while queue and time.perf_counter() < stop_at:
            i = queue.pop()
            batch = batches[i]
            body = {"model": model, "input": batch[0] if len(batch) == 1 else batch, "encoding_format": "float",
                    **(extra or {})}
            sent = time.perf_counter()
            try:
                status, data = await client.post(body)
                if status != 200:
                    raise ValueError(f"HTTP {status}: {str(data)[:300]}")
                vectors = _vectors(data, len(batch))
            except Exception as exc:  # noqa: BLE001 - a benchmark reports failures, it does not stop on them
                errors.append(f"{type(exc).__name__}: {exc}")
                continue
            latencies.append(time.perf_counter() - sent)
            done_tokens += batch_tokens[i]
            done_texts += len(batch)
            if keep:
                kept[i] = vectors

    try:
        await asyncio.gather(*(worker() for _ in range(clients)))
    finally:
        seconds = time.perf_counter() - start
        await client.close()
    return LoadResult(seconds, latencies, done_tokens, done_texts, errors, kept)


def concurrent_load(url: str, model: str, texts: list[str], tokens: list[int], clients: int, batch: int,
                    deadline: float = 600.0, extra: dict | None = None) -> LoadResult:
    """``clients`` concurrent clients, each sending ``batch`` texts per request until ``texts`` run out.

    ``tokens[i]`` is the token count of ``texts[i]``; the load stops early (and counts what was answered)
    at ``deadline`` seconds.
    """
    batches = [texts[i:i + batch] for i in range(0, len(texts), batch)]
    batch_tokens = [sum(tokens[i:i + batch]) for i in range(0, len(texts), batch)]
    return asyncio.run(_run(url, model, batches, batch_tokens, clients, deadline, extra, keep=False))


def lone_load(url: str, model: str, texts: list[str], tokens: list[int], deadline: float = 300.0,
              extra: dict | None = None) -> LoadResult:
    """One client sending one text per request, sequentially; keeps the embeddings (``embeddings[i]``: text i's)."""
    return asyncio.run(_run(url, model, [[t] for t in texts], tokens, 1, deadline, extra, keep=True))
