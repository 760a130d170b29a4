"""Soak test of ``wde serve`` under hostile and heavy load (slow tier, loopback only; issue 23's acceptance).

A real ``wde serve`` process serves MiniLM and a random-weight cross-encoder, with two API keys from a key
file. 64 asyncio clients run for a bounded time and count: 4 send maximal requests (``--max-request-tokens``)
under the ``bulk`` key, 4 send maximal requests and hang up after 0.3 s, 4 send half a body and stall, and 52
mix every other route under the ``interactive`` key (single texts, batches, reranks, 2-token texts, tokenize,
decode, token vectors, similarity, score, bad requests). Every answer is checked against in-process
``Engine`` results; the 2-token requests' latency is measured while the maximal ones run; RSS is compared
after a warm-up round and after the soak.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import time
from dataclasses import dataclass

import httpx
import numpy as np
import pytest

from wde_plugin_kit.corpus import minilm_path
from wde_plugin_kit.serve import ServeProcess
from test_server_hostile import rss_bytes
from test_server_load import (CLIENTS, EMBEDDER, RERANKER, Reference, Stats, bad, batch, close, ref,  # noqa: F401
                              rerank, send, single)

pytestmark = pytest.mark.slow

# 45 s by default (CI's time budget); WDE_SOAK_SECONDS=600 for a longer soak
SOAK_SECONDS, WARM_UP_SECONDS = float(os.environ.get("WDE_SOAK_SECONDS", 45)), 12.0
MAX_TOKENS, MAXIMAL = 16_384, [" ".join(["word"] * 254)] * 64  # 64 x 256 tokens: exactly the limit
# a 2-token request waits for the batch running when it arrives, then runs in the next: two batch times; with the
# soak's own 64 clients on the same 2 cores a 4,096-token batch takes ~1 s, a 2,048-token one ~0.5 s (docs/serving.md)
BATCH_TOKENS = 2048
HEAVY, QUITTERS, STALLERS = 4, 4, 4  # the other 52 clients mix the light routes
BULK, INTERACTIVE = {"authorization": "Bearer k-bulk"}, {"authorization": "Bearer k-interactive"}
TINY = ["hi", "ok", "yes", "cat", "dog", "sun"]  # one word: [CLS] word [SEP]


@dataclass
class Expected:
    """In-process answers the soak's responses are checked against."""

    ref: Reference
    maximal: np.ndarray  # MiniLM's vector of one maximal text
    tiny: dict[str, np.ndarray]
    tokens: dict[str, list[int]]
    token_vectors: dict[str, np.ndarray]


@pytest.fixture(scope="module")
def expected(ref) -> Expected:  # noqa: F811 - the imported fixture
    from wde_core import Engine

    engine = Engine(str(minilm_path()))
    tiny = dict(zip(TINY, engine.encode(TINY)))
    vectors = dict(zip(TINY, engine.embed_tokens(TINY)))
    tokens = {t: engine.tokenizer.tokenizer(t)["input_ids"] for t in TINY}
    maximal = np.asarray(engine.encode(MAXIMAL[:1]), dtype=np.float32)[0]
    engine.close()
    return Expected(ref, maximal, tiny, tokens, vectors)


def serve(reference: Reference, base) -> ServeProcess:
    keys = base / "keys.json"
    keys.write_text(json.dumps({"keys": [{"name": "bulk", "key": "k-bulk"},
                                         {"name": "interactive", "key": "k-interactive"}]}))
    return ServeProcess(str(minilm_path()), str(reference.ce_dir), "--served-model-name", EMBEDDER,
                        "--served-model-name", RERANKER, "--auto-truncate", "--key-file", str(keys),
                        "--max-request-tokens", str(MAX_TOKENS), "--body-timeout", "3", "--header-timeout", "2",
                        "--engine-arg", f"max_num_batched_tokens={BATCH_TOKENS}", log=base / "serve.log")


# -- the light routes beyond test_server_load's: (kind, path, body, check) ------------------------------------
def ok(r: httpx.Response):
    assert r.status_code == 200, f"{r.status_code} {r.text[:200]}"
    return r.json()


TINY_PHASES: list[tuple[float, float]] = []  # the 2-token requests' x-queue-time and x-inference-time (ms)


def tiny(rng: random.Random, exp: Expected):
    word = rng.choice(TINY)

    def check(r: httpx.Response) -> None:
        close(ok(r)[0], exp.tiny[word])
        TINY_PHASES.append((float(r.headers["x-queue-time"]), float(r.headers["x-inference-time"])))
    return "tiny", "/embed?model=minilm", {"inputs": word}, check


def tokenize(rng: random.Random, exp: Expected):
    word = rng.choice(TINY)
    return "tokenize", "/tokenize?model=minilm", {"inputs": word}, \
        lambda r: _equal([t["id"] for t in ok(r)[0]], exp.tokens[word])


def decode(rng: random.Random, exp: Expected):
    word = rng.choice(TINY)
    return "decode", "/decode?model=minilm", {"ids": exp.tokens[word]}, lambda r: _equal(ok(r), [word])


def token_vectors(rng: random.Random, exp: Expected):
    word = rng.choice(TINY)
    return "embed_all", "/embed_all?model=minilm", {"inputs": [word]}, \
        lambda r: close(ok(r)[0], np.asarray(exp.token_vectors[word], dtype=np.float32))


def similarity(rng: random.Random, exp: Expected):
    a, b = rng.sample(TINY, 2)
    want = np.float32(exp.tiny[a] @ exp.tiny[b])
    return "similarity", "/similarity?model=minilm", {"inputs": {"source_sentence": a, "sentences": [b]}}, \
        lambda r: close(ok(r), np.asarray([want]))


def score(rng: random.Random, exp: Expected):
    a, b = rng.sample(TINY, 2)
    want = np.float32(exp.tiny[a] @ exp.tiny[b])
    return "score", "/score", {"model": EMBEDDER, "text_1": a, "text_2": b}, \
        lambda r: close([ok(r)["data"][0]["score"]], np.asarray([want]))


def _equal(got, want) -> None:
    assert got == want, f"{got} != {want}"


def from_load(kind):
    return lambda rng, exp: kind(rng, exp.ref)


LIGHT = (from_load(single), from_load(batch), from_load(rerank), from_load(bad), tiny, tokenize, decode,
         token_vectors, similarity, score)
WEIGHTS = (15, 5, 10, 10, 25, 8, 7, 7, 7, 6)


# -- the clients ----------------------------------------------------------------------------------------
async def light(http, seed: int, exp: Expected, stats: Stats, deadline: float) -> None:
    rng = random.Random(seed)
    while time.monotonic() < deadline:
        kind, path, body, check = rng.choices(LIGHT, WEIGHTS)[0](rng, exp)
        await send(http, stats, kind, path, body, check, INTERACTIVE)


async def heavy(http, exp: Expected, stats: Stats, deadline: float) -> None:
    def check(r):
        close([d["embedding"] for d in ok(r)["data"]], np.tile(exp.maximal, (len(MAXIMAL), 1)))

    while time.monotonic() < deadline:
        await send(http, stats, "maximal", "/v1/embeddings", {"model": EMBEDDER, "input": MAXIMAL}, check, BULK)


async def quitter(url: str, stats: Stats, deadline: float) -> None:
    async with httpx.AsyncClient(base_url=url, timeout=0.3, headers=BULK) as http:
        while time.monotonic() < deadline:
            stats.sent["hang-up"] += 1
            try:
                await http.post("/v1/embeddings", json={"model": EMBEDDER, "input": MAXIMAL})
                stats.wrong.append("hang-up: answered within 0.3 s")
            except httpx.TimeoutException:
                stats.latency["hang-up"].append(0.3)
            await asyncio.sleep(1.0)


async def staller(port: int, stats: Stats, deadline: float) -> None:
    """Headers and 5 of 40 body bytes, then nothing: the server must answer 408 after --body-timeout."""
    while time.monotonic() < deadline:
        stats.sent["stall"] += 1
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"POST /embed HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k-interactive\r\n"
                     b"Content-Type: application/json\r\nContent-Length: 40\r\n\r\n{\"inp")
        start = time.perf_counter()
        try:
            line = await asyncio.wait_for(reader.readline(), 15)
            if line.startswith(b"HTTP/1.1 408 "):
                stats.latency["stall"].append(time.perf_counter() - start)
            else:
                stats.wrong.append(f"stall: {line!r}")
        except (asyncio.TimeoutError, ConnectionError) as exc:
            stats.lost.append(f"stall: {exc!r}")
        finally:
            writer.close()


async def soak(server: ServeProcess, exp: Expected, seconds: float) -> Stats:
    stats = Stats()
    deadline = time.monotonic() + seconds
    limits = httpx.Limits(max_connections=CLIENTS, max_keepalive_connections=CLIENTS)
    async with httpx.AsyncClient(base_url=server.url, timeout=120, limits=limits) as http:
        light_clients = CLIENTS - HEAVY - QUITTERS - STALLERS
        await asyncio.gather(*(heavy(http, exp, stats, deadline) for _ in range(HEAVY)),
                             *(quitter(server.url, stats, deadline) for _ in range(QUITTERS)),
                             *(staller(server.port, stats, deadline) for _ in range(STALLERS)),
                             *(light(http, seed, exp, stats, deadline) for seed in range(light_clients)))
    return stats


def report(stats: Stats, seconds: float) -> str:
    n = sum(stats.sent.values())
    lines = [f"soak: {n} requests in {seconds:.0f} s from {CLIENTS} clients"]
    for kind, values in sorted(stats.latency.items()):
        p50, p99 = np.percentile(values, [50, 99]) * 1000
        lines.append(f"  {kind:10} n={len(values):5}  p50={p50:7.1f} ms  p99={p99:7.1f} ms")
    if TINY_PHASES:
        (q50, i50), (q99, i99) = np.percentile(TINY_PHASES, [50, 99], axis=0)
        lines.append(f"  tiny: queue p50={q50:.0f} p99={q99:.0f} ms, inference p50={i50:.0f} p99={i99:.0f} ms")
    return "\n".join(lines)


def settled_rss(pid: int, warm: int, seconds: float = 15.0) -> int:
    """The server's RSS once the soak's last answers are out: the least of samples over up to ``seconds`` (past
    one 10 s malloc_trim period), stopping early within 20% of ``warm``. A transient heap peak that the trim
    returns does not count; memory kept (a leak) stays in every sample."""
    samples, deadline = [rss_bytes(pid)], time.monotonic() + seconds
    while min(samples) > 1.2 * warm and time.monotonic() < deadline:
        time.sleep(1.0)
        samples.append(rss_bytes(pid))
    return min(samples)


def test_soak_no_lost_no_wrong_no_5xx_bounded_latency_flat_memory(expected, tmp_path):
    server = serve(expected.ref, tmp_path)
    try:
        asyncio.run(soak(server, expected, WARM_UP_SECONDS))
        warm = rss_bytes(server.proc.pid)
        start = time.monotonic()
        TINY_PHASES.clear()
        stats = asyncio.run(soak(server, expected, SOAK_SECONDS))
        seconds = time.monotonic() - start
        after = settled_rss(server.proc.pid, warm)
        metrics = httpx.get(server.url + "/metrics").text
    finally:
        code = server.stop()
    print("\n" + report(stats, seconds) + f"\n  RSS after warm-up {warm / 2**20:.0f} MiB, after the soak "
          f"{after / 2**20:.0f} MiB ({after / warm - 1:+.1%})")
    assert not stats.lost, f"{len(stats.lost)} lost, e.g. {stats.lost[:3]}"
    assert not stats.wrong, f"{len(stats.wrong)} wrong, e.g. {stats.wrong[:3]}"
    assert sum(len(v) for v in stats.latency.values()) == sum(stats.sent.values())
    assert stats.sent["maximal"] >= HEAVY and stats.sent["hang-up"] >= QUITTERS and stats.sent["stall"] >= STALLERS
    # a 2-token request waits for the running batch, then runs in the next: two batch times, the batch's time read
    # off the server under the soak's own load (its x-inference-time: ~0.5 s on a Zen 3, ~0.95 s on a Zen 1, where
    # the p99 came to 2.15 s); 3 of them or 2 s, whichever is more, against the maximal requests' ~60 s
    batch = np.percentile([inference for _, inference in TINY_PHASES], 50) / 1000
    assert np.percentile(stats.latency["tiny"], 99) < max(2.0, 3.0 * batch), f"batch {batch:.2f} s"
    assert abs(after / warm - 1) <= 0.20
    assert 'reason="disconnect"' in metrics and 'key_name="bulk"' in metrics
    assert code == 0 and "Traceback" not in server.log_path.read_text()
