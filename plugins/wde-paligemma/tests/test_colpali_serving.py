"""ColPali over a real socket, served as ColQwen2 is: ``wde serve`` of a random ColPali answers TEI's ``/embed_all``
and Cohere's ``/v2/embed`` (``embedding_types`` ``multi_vector_base64``) with every token's vector (queries as text,
pages as ``data:image/png;base64,`` URLs) equal to ``Engine.encode(output="multi_vector")``, and ``/v2/rerank`` and
``/rerank`` rank page images by MaxSim as ``multi_vector_rerank`` does."""

from __future__ import annotations

import base64
import io

import httpx
import numpy as np
import pytest

from wde_plugin_kit.image_builders import random_images
from wde_plugin_kit.vision_language import save_random_colpali
from wde_core import Engine
from wde_plugin_kit.serve import ServeProcess

QUERIES = ["what is the revenue in 2023?", "a chart of rainfall by month"]


def data_url(picture) -> str:
    """``picture`` as a PNG data URL."""
    buffer = io.BytesIO()
    picture.save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """The running server, the model directory and four pages."""
    directory = save_random_colpali(tmp_path_factory.mktemp("colpali") / "colpali-tiny")
    process = ServeProcess(str(directory), log=tmp_path_factory.mktemp("colpali-serve") / "serve.log")
    yield process, directory, [picture.convert("RGB") for picture in random_images(4, seed=3)]
    assert process.stop() == 0, process.log()


def post(server, route, body):
    return httpx.post(server.url + route, json=body, timeout=60)


def test_embed_all_gives_every_token_vector_of_queries_and_pages(served):
    server, directory, pages = served
    answer = post(server, "/embed_all", {"inputs": [QUERIES[0], data_url(pages[0]), QUERIES[1]]})
    assert answer.status_code == 200, answer.text
    with Engine(str(directory), device="cpu") as engine:
        expected = engine.encode([QUERIES[0], pages[0], QUERIES[1]], output="multi_vector")
        ranked = engine.multi_vector_rerank(QUERIES[1], pages)
        page_vectors = engine.encode(pages[1:3], output="multi_vector")
    got = [np.array(vectors) for vectors in answer.json()]
    assert [g.shape for g in got] == [e.shape for e in expected]
    assert max(np.abs(g - e).max() for g, e in zip(got, expected)) <= 1e-4
    cohere = post(server, "/v2/rerank", {"query": QUERIES[1], "documents": [data_url(p) for p in pages], "top_n": 3})
    assert cohere.status_code == 200, cohere.text
    results = cohere.json()["results"]
    assert [r["index"] for r in results] == [r["index"] for r in ranked[:3]]
    assert max(abs(r["relevance_score"] - e["score"]) for r, e in zip(results, ranked)) <= 1e-4
    tei = post(server, "/rerank", {"query": QUERIES[1], "texts": [data_url(p) for p in pages]})
    assert tei.status_code == 200 and [r["index"] for r in tei.json()] == [r["index"] for r in ranked], tei.text
    cohere_embed = post(server, "/v2/embed", {"images": [data_url(p) for p in pages[1:3]],
                                              "embedding_types": ["multi_vector_base64"]})
    assert cohere_embed.status_code == 200, cohere_embed.text
    width = page_vectors[0].shape[1]
    decoded = [np.frombuffer(base64.b64decode(s), "<f4").reshape(-1, width)
               for s in cohere_embed.json()["embeddings"]["multi_vector_base64"]]
    assert [d.shape for d in decoded] == [e.shape for e in page_vectors]
    assert max(np.abs(d - e).max() for d, e in zip(decoded, page_vectors)) <= 1e-4


def test_pooled_routes_and_placeholders_are_refused(served):
    server, _, _ = served
    answer = post(server, "/v1/embeddings", {"input": QUERIES})
    assert answer.status_code == 400 and "/embed_all" in answer.text and "/v2/rerank" in answer.text
    bad = post(server, "/embed_all", {"inputs": ["fine", "<image> sneaky"]})
    assert bad.status_code in (400, 422) and "placeholder token" in bad.text
    assert post(server, "/embed_all", {"inputs": ["still serving"]}).status_code == 200
