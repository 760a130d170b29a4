"""``wde serve`` limits: API key on every inference route, concurrency (429), int8 without calibration,
health after an engine loop stops, ``--protect-all``."""

from __future__ import annotations

import asyncio
import threading
import time

import httpx
import pytest

from wde_plugin_kit.corpus import minilm_path
from wde_plugin_kit.serve import ServeProcess, free_port
from wde_server.options import ServerOptions

KEY = "s3cret-key"
INFERENCE = [("/v1/embeddings", {"input": "hi"}), ("/v2/embed", {"texts": ["hi"]}), ("/embed", {"inputs": "hi"}),
             ("/embed_all", {"inputs": "hi"}),
             ("/similarity", {"inputs": {"source_sentence": "a", "sentences": ["b"]}}),
             ("/score", {"text_1": "a", "text_2": "b"}), ("/tokenize", {"inputs": "hi"}), ("/decode", {"ids": [101]}),
             ("/rerank", {"query": "a", "texts": ["b"]}), ("/v1/rerank", {"query": "a", "documents": ["b"]})]


@pytest.fixture(scope="module")
def keyed(tmp_path_factory):
    base = tmp_path_factory.mktemp("keyed")
    process = ServeProcess(str(minilm_path()), "--served-model-name", "minilm", "--max-concurrent-requests", "2",
                           log=base / "serve.log", env={"WDE_API_KEY": KEY})
    yield process
    assert process.stop() == 0, process.log()


@pytest.mark.parametrize("path, body", INFERENCE, ids=[p for p, _ in INFERENCE])
def test_every_inference_route_needs_the_key(keyed, path, body):
    for headers, what in (({}, "missing"), ({"authorization": "Bearer wrong"}, "wrong")):
        response = httpx.post(keyed.url + path, json=body, headers=headers)
        assert response.status_code == 401 and what in response.text, response.text
    response = httpx.post(keyed.url + path, json=body, headers={"authorization": f"Bearer {KEY}"})
    assert response.status_code in (200, 400, 422), response.text  # 400/422: a rerank route names the embedder's routes


def test_open_routes_stay_open_and_a_refused_key_costs_no_inference(keyed):
    for path in ("/health", "/metrics", "/docs", "/openapi.json"):
        assert httpx.get(keyed.url + path).status_code == 200, path
    metrics = httpx.get(keyed.url + "/metrics").text
    assert 'route="/v1/embeddings",status="401"' in metrics  # answered by the middleware: no model involved
    assert 'model="",route="/v1/embeddings",status="401"' in metrics


def test_int8_without_calibration_says_how_to_enable_it(keyed):
    response = httpx.post(keyed.url + "/v2/embed", json={"texts": ["a"], "embedding_types": ["int8"]},
                          headers={"authorization": f"Bearer {KEY}"})
    assert response.status_code == 400 and "--calibration FILE" in response.json()["error"]["message"]


def test_over_the_concurrency_limit_is_429_with_retry_after(keyed):
    texts = [" ".join(["word"] * 200)] * 64

    async def burst():
        async with httpx.AsyncClient(timeout=120, headers={"authorization": f"Bearer {KEY}"}) as client:
            return await asyncio.gather(*(client.post(keyed.url + "/v1/embeddings",
                                                      json={"input": texts, "model": "minilm"}) for _ in range(8)))

    responses = asyncio.run(burst())
    codes = sorted(r.status_code for r in responses)
    assert codes.count(200) >= 2 and 429 in codes and set(codes) <= {200, 429}, codes
    refused = next(r for r in responses if r.status_code == 429)
    assert refused.headers["retry-after"] == "1" and "--max-concurrent-requests" in refused.text


def test_protect_all_also_guards_health_metrics_and_docs():
    options = ServerOptions(api_key=KEY, protect_all=True)
    assert all(options.needs_key(p) for p in ("/health", "/metrics", "/docs", "/v1/embeddings"))
    assert not ServerOptions(api_key=KEY).needs_key("/health") and ServerOptions(api_key=KEY).needs_key("/rerank")
    assert not ServerOptions(api_key=None).needs_key("/v1/embeddings")


def test_health_is_503_naming_the_model_whose_engine_loop_stopped():
    import uvicorn

    from wde_server import create_app

    app = create_app([str(minilm_path())], served_model_names=["minilm"])
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.1)
    try:
        assert httpx.get(url + "/health").status_code == 200
        asyncio.run(app.state.models.get("minilm").engine.close())  # the loop ends
        health = httpx.get(url + "/health")
        assert health.status_code == 503 and "minilm" in health.json()["error"]
        refused = httpx.post(url + "/v1/embeddings", json={"input": "hi"})
        assert refused.status_code == 503 and "minilm" in refused.json()["error"]["message"]
    finally:
        server.should_exit = True
        thread.join(60)
