"""``wde serve`` under hostile-but-legitimate clients (issue 23): each finding of the probe reproduced on a
real server process over loopback sockets, with bounded request loops.

One server with small limits serves most tests; the shutdown, readiness and start-up tests start their own.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np
import pytest

from wde_plugin_kit.corpus import minilm_path
from wde_plugin_kit.serve import WDE, ServeProcess

KEYS = {"keys": [{"name": "open", "key": "k-open"},
                 {"name": "slow-lane", "key": "k-slow", "requests_per_minute": 3},
                 {"name": "small-quota", "key": "k-quota", "tokens_per_minute": 60}]}
OPEN = {"authorization": "Bearer k-open"}
MAX_TOKENS = 20_000  # --max-request-tokens: a maximal request here is ~3 s of MiniLM on 2 cores
WORDS_254 = " ".join(["word"] * 254)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    base = tmp_path_factory.mktemp("hostile")
    keys = base / "keys.json"
    keys.write_text(json.dumps(KEYS))
    process = ServeProcess(str(minilm_path()), "--served-model-name", "minilm", "--key-file", str(keys),
                           "--max-request-tokens", str(MAX_TOKENS), "--max-output-floats", "1000000",
                           "--max-concurrent-requests", "8", "--body-timeout", "2", "--header-timeout", "1",
                           log=base / "serve.log")
    yield process
    assert process.stop() == 0, process.log()


def post(server, path, body, headers=OPEN, **kw):
    return httpx.post(server.url + path, json=body, headers=headers, timeout=kw.pop("timeout", 120), **kw)


def rss_bytes(pid: int) -> int:
    """The resident set size of process ``pid``."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
    return int(fields["VmRSS"].split()[0]) * 1024


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` (its threads included)."""
    stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(stat[11]) + int(stat[12])) / os.sysconf("SC_CLK_TCK")


def metric(server, name: str, **labels) -> float:
    """The value of one sample of ``/metrics`` (0 when absent)."""
    text = httpx.get(server.url + "/metrics").text
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        if line.startswith(name + "{"):
            got = ",".join(sorted(line[len(name) + 1:line.index("}")].split(",")))
            if got == want:
                return float(line.rsplit(" ", 1)[1])
    return 0.0


# -- 1. /embed_all amplification -------------------------------------------------------------------------

def test_embed_all_output_is_bounded_before_any_work_and_streamed_when_allowed(server):
    before = rss_bytes(server.proc.pid)
    refused = post(server, "/embed_all", {"inputs": [WORDS_254] * 64})  # 16k tokens x 384 floats
    assert refused.status_code == 413, refused.text
    assert "--max-output-floats" in refused.json()["error"] and "1000000 floats" in refused.json()["error"]
    assert rss_bytes(server.proc.pid) - before < 100 * 2**20
    allowed = post(server, "/embed_all", {"inputs": ["a short text", "another one"]})
    assert allowed.status_code == 200 and allowed.headers.get("transfer-encoding") == "chunked"
    vectors = allowed.json()
    assert [len(v) for v in vectors] == [5, 4] and {len(t) for v in vectors for t in v} == {384}


# -- 2. /tokenize limits, off the event loop -------------------------------------------------------------

def test_tokenize_has_the_request_token_limit(server):
    refused = post(server, "/tokenize", {"inputs": [WORDS_254] * 100})  # 25,600 tokens
    assert refused.status_code == 413 and "--max-request-tokens" in refused.json()["error"], refused.text
    ok = post(server, "/tokenize", {"inputs": ["hello world"]})
    assert [t["text"] for t in ok.json()[0]] == ["[CLS]", "hello", "world", "[SEP]"]


def test_a_lone_surrogate_is_a_422_naming_the_input_not_a_500(server):
    body = b'{"inputs": ["fine", "bad \\ud800 text"]}'
    response = httpx.post(server.url + "/tokenize", content=body, headers={**OPEN, "content-type": "application/json"})
    assert response.status_code == 422 and "inputs[1]" in response.json()["error"], response.text


# -- 3. abandoned requests ----------------------------------------------------------------------------

def test_a_disconnected_clients_work_is_dropped_and_counted_as_cancelled(server):
    pid = server.proc.pid
    before = metric(server, "wde_requests_cancelled_total", model="minilm", reason="disconnect")
    heavy = {"input": [WORDS_254] * 70, "model": "minilm"}  # ~17.9k tokens each: ~3 s of work
    for _ in range(6):
        with pytest.raises(httpx.TimeoutException):
            post(server, "/v1/embeddings", heavy, timeout=0.3)
    time.sleep(1.5)  # what was in a batch at the time finishes; nothing else may run
    used = cpu_seconds(pid)
    time.sleep(2.0)
    assert cpu_seconds(pid) - used < 0.5  # computed in full, 6 x 3 s of work would still be running
    cancelled = metric(server, "wde_requests_cancelled_total", model="minilm", reason="disconnect") - before
    assert cancelled == 6
    assert metric(server, "wde_requests_total", model="minilm", route="/v1/embeddings", status="499") >= 6


# -- 4. per-request token limit, deadlines, fair scheduling -----------------------------------------------

def test_a_request_over_the_token_limit_is_refused_before_any_work(server):
    response = post(server, "/score", {"text_1": "q", "text_2": [WORDS_254] * 100})
    assert response.status_code == 413 and "--max-request-tokens" in response.json()["error"]["message"]


def test_a_passed_deadline_is_a_504_and_its_work_is_dropped(server):
    before = metric(server, "wde_requests_cancelled_total", model="minilm", reason="deadline")
    start = time.monotonic()
    response = post(server, "/v1/embeddings", {"input": [WORDS_254] * 70}, headers={**OPEN, "x-request-timeout": "0.5"})
    assert response.status_code == 504 and "X-Request-Timeout" in response.json()["error"]["message"]
    assert time.monotonic() - start < 2.0
    assert metric(server, "wde_requests_cancelled_total", model="minilm", reason="deadline") - before == 1
    bad = post(server, "/embed", {"inputs": "hi"}, headers={**OPEN, "x-request-timeout": "soon"})
    assert bad.status_code == 400 and "X-Request-Timeout" in bad.json()["error"]


def batch_seconds(server, texts: int) -> float:
    """One batch's time on this machine: the server's own inference time (``x-inference-time``) of a request of
    ``texts`` x 256 tokens sent alone, after one such request to warm it up."""
    body = {"inputs": [WORDS_254] * texts}
    post(server, "/embed", body)
    return float(post(server, "/embed", body).headers["x-inference-time"]) / 1000


def test_a_small_request_is_answered_while_maximal_ones_run(server):
    """A 3-token request waits for the batch running when it arrives, then runs in the next: two batch times (a
    4,096-token batch: ~0.7 s on a Zen 3, ~1.4 s on a Zen 1), bounded by 2.5 of them or 2 s, whichever is more,
    while six maximal requests (~18 s of work) are still unfinished."""
    reference = np.array(post(server, "/embed", {"inputs": "tiny"}).json()[0])
    bound = max(2.0, 2.5 * batch_seconds(server, 16))  # 16 x 256 tokens: the CPU's 4,096-token batch

    async def scenario():
        async with httpx.AsyncClient(timeout=120, headers=OPEN) as client:
            heavy = [asyncio.ensure_future(client.post(server.url + "/v1/embeddings",
                                                       json={"input": [WORDS_254] * 75})) for _ in range(6)]
            await asyncio.sleep(1.0)  # six maximal requests (~18 s of work) are queued and running
            start = time.monotonic()
            small = await client.post(server.url + "/embed", json={"inputs": "tiny"})
            latency = time.monotonic() - start
            unfinished = sum(not task.done() for task in heavy)
            for task in heavy:  # hang up: the server drops what is left of them
                task.cancel()
            await asyncio.gather(*heavy, return_exceptions=True)
            return small, latency, unfinished

    small, latency, unfinished = asyncio.run(scenario())
    assert small.status_code == 200 and unfinished >= 5
    np.testing.assert_allclose(small.json()[0], reference, atol=1e-5)
    timing = {k: v for k, v in small.headers.items() if k.endswith("-time")}
    assert latency < bound, f"a 3-token request waited {latency:.2f} s (bound {bound:.2f} s) behind maximal ones " \
        f"({timing})"


# -- 5. slow clients ------------------------------------------------------------------------------------

def slow_socket(server, *, headers_done: bool) -> socket.socket:
    """A connection that sends its headers (all, or half) and 5 of its 40 body bytes, then stalls."""
    s = socket.create_connection(("127.0.0.1", server.port))
    head = b"POST /embed HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k-open\r\nContent-Type: application/json\r\n"
    s.sendall(head + b"Content-Length: 40\r\n\r\n{\"inp" if headers_done else head)
    return s


def test_slow_bodies_take_no_slot_and_get_408_after_the_body_timeout(server):
    sockets = [slow_socket(server, headers_done=True) for _ in range(12)]  # more than --max-concurrent-requests
    try:
        time.sleep(0.3)
        assert post(server, "/embed", {"inputs": "still served"}).status_code == 200
        start = time.monotonic()
        for s in sockets:
            s.settimeout(10)
            assert s.recv(200).startswith(b"HTTP/1.1 408 ")
        assert time.monotonic() - start < 4.0
    finally:
        for s in sockets:
            s.close()


def test_slow_headers_are_cut_off_after_the_header_timeout(server):
    s = slow_socket(server, headers_done=False)
    s.settimeout(10)
    start = time.monotonic()
    assert s.recv(200) == b""  # closed by the server
    assert 0.5 < time.monotonic() - start < 4.0
    s.close()


def test_sigterm_exits_within_the_graceful_timeout_even_with_a_request_stuck(tmp_path):
    process = ServeProcess(str(minilm_path()), "--graceful-timeout", "2", "--body-timeout", "60",
                           log=tmp_path / "serve.log")
    stuck = slow_socket(process, headers_done=True)
    try:
        time.sleep(0.3)
        start = time.monotonic()
        process.proc.send_signal(signal.SIGTERM)
        process.proc.wait(30)
        assert time.monotonic() - start < 10, process.log()
    finally:
        stuck.close()
        process.stop()


# -- 6. memory (RSS across rounds: the soak test) --------------------------------------------------------------

@pytest.mark.parametrize("environment, applied", [({}, {"MALLOC_ARENA_MAX": 2}), ({"MALLOC_ARENA_MAX": "4"}, {})])
def test_wde_serve_caps_mallocs_arenas_unless_the_environment_says(environment, applied):
    code = "from wde_server.process import malloc_trim, tune_allocator; print(tune_allocator(), malloc_trim() in (0, 1))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                            env={**os.environ, **environment})
    assert result.stdout.split() == [*str(applied).split(), "True"], result.stderr


# -- 7. metrics labels ----------------------------------------------------------------------------------

def test_unknown_paths_share_one_metrics_label(server):
    size = len(httpx.get(server.url + "/metrics").content)
    with httpx.Client() as client:
        for i in range(300):
            assert client.post(f"{server.url}/probe-{i}-{os.urandom(4).hex()}").status_code == 401
    text = httpx.get(server.url + "/metrics").text
    assert "probe-" not in text and 'route="<unmatched>",status="401"' in text
    assert len(text) - size < 2000


# -- 8. empty keys --------------------------------------------------------------------------------------

@pytest.mark.parametrize("how", ["flag", "env"])
def test_an_empty_api_key_refuses_to_start(how):
    args, env = (["--api-key", ""], {}) if how == "flag" else ([], {"WDE_API_KEY": "  "})
    result = subprocess.run([*WDE, "serve", "--port", "1", *args], capture_output=True, text=True, timeout=120,
                            env={**os.environ, **env})
    assert result.returncode != 0 and "empty" in result.stderr and "refusing to start" in result.stderr


# -- 9. smaller findings --------------------------------------------------------------------------------

def test_a_chunked_body_over_the_payload_limit_is_413(server):
    def chunks():
        for _ in range(25):
            yield b"x" * 100_000

    response = httpx.post(server.url + "/embed", content=chunks(), headers={**OPEN, "content-type": "application/json"})
    assert response.status_code == 413 and "--payload-limit" in response.json()["error"]


def test_a_trailing_slash_is_not_redirected_to_the_callers_host(server):
    response = httpx.post(server.url + "/v1/embeddings/", json={"input": "a"},
                          headers={**OPEN, "host": "evil.example"})
    assert response.status_code == 404 and "location" not in response.headers


# -- per-key limits ---------------------------------------------------------------------------------------

def test_each_key_has_its_own_request_rate_with_retry_after(server):
    slow = {"authorization": "Bearer k-slow"}
    codes = [post(server, "/embed", {"inputs": "hi"}, headers=slow).status_code for _ in range(4)]
    assert codes == [200, 200, 200, 429]
    refused = post(server, "/embed", {"inputs": "hi"}, headers=slow)
    assert refused.status_code == 429 and 15 <= int(refused.headers["retry-after"]) <= 20
    assert "slow-lane" in refused.json()["error"]
    assert post(server, "/embed", {"inputs": "hi"}).status_code == 200  # the other keys are not held back
    assert post(server, "/embed", {"inputs": "hi"}, headers={"authorization": "Bearer k-nope"}).status_code == 401


def test_each_key_has_its_own_token_quota_and_metrics_name_keys_not_secrets(server):
    quota = {"authorization": "Bearer k-quota"}
    assert post(server, "/embed", {"inputs": " ".join(["word"] * 50)}, headers=quota).status_code == 200  # 52
    refused = post(server, "/embed", {"inputs": " ".join(["word"] * 20)}, headers=quota)  # 22 more: over 60
    assert refused.status_code == 429 and "small-quota" in refused.json()["error"]
    assert 1 <= int(refused.headers["retry-after"]) <= 30
    too_big = post(server, "/embed", {"inputs": " ".join(["word"] * 100)}, headers=quota)
    assert too_big.status_code == 429 and "split it" in too_big.json()["error"]
    text = httpx.get(server.url + "/metrics").text
    assert metric(server, "wde_key_tokens_total", key_name="small-quota") == 52
    assert 'key_name="small-quota",status="429"' in text and "k-quota" not in text and "k-open" not in text


# -- readiness and liveness -------------------------------------------------------------------------------

def children(pid: int) -> list[int]:
    """The child processes of ``pid``."""
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(c) for c in (task / "children").read_text().split()]
    return found


def test_a_dead_executor_makes_readiness_fail_while_liveness_holds(tmp_path):
    process = ServeProcess(str(minilm_path()), "--engine-arg", "executor=data_parallel",
                           "--engine-arg", "num_replicas=1", log=tmp_path / "serve.log")
    try:
        assert httpx.get(process.url + "/ready").status_code == 200
        for child in children(process.proc.pid):
            os.kill(child, signal.SIGKILL)
        deadline = time.monotonic() + 20
        while httpx.get(process.url + "/ready").status_code == 200 and time.monotonic() < deadline:
            time.sleep(0.2)
        ready = httpx.get(process.url + "/ready")
        assert ready.status_code == 503 and "cannot serve" in ready.json()["error"]
        assert httpx.get(process.url + "/health").status_code == 503
        assert httpx.get(process.url + "/live").status_code == 200
    finally:
        process.stop()
