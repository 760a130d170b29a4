"""ColPali over a real socket, served as ColQwen2 is: ``wde serve`` of a random ColPali answers TEI's ``/embed_all``
and Cohere's ``/v2/embed`` (``embedding_types`` ``multi_vector_base64``) with every token's vector (queries as text,
pages as ``data:image/png;base64,`` URLs) equal to ``Engine.encode(output="multi_vector")``, and ``/v2/rerank`` and
``/rerank`` rank page images by MaxSim as ``multi_vector_rerank`` does."""

from __future__ import annotations

import base64

import numpy as np
import pytest

from wde_core import Engine
from wde_plugin_kit.image_builders import random_images
from wde_plugin_kit.late_interaction_checks import (QUERIES, assert_placeholder_refused, assert_pooled_routes_refused,
                                                    assert_rerank_routes, assert_token_vectors, data_url, post)
from wde_plugin_kit.serve import ServeProcess
from wde_plugin_kit.vision_language import save_random_colpali


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """The running server, the model directory and four pages."""
    directory = save_random_colpali(tmp_path_factory.mktemp("colpali") / "colpali-tiny")
    process = ServeProcess(str(directory), log=tmp_path_factory.mktemp("colpali-serve") / "serve.log")
    yield process, directory, [picture.convert("RGB") for picture in random_images(4, seed=3)]
    assert process.stop() == 0, process.log()


def test_embed_all_gives_every_token_vector_of_queries_and_pages(served):
    server, directory, pages = served
    answer = post(server, "/embed_all", {"inputs": [QUERIES[0], data_url(pages[0]), QUERIES[1]]})
    assert answer.status_code == 200, answer.text
    with Engine(str(directory), device="cpu") as engine:
        expected = engine.encode([QUERIES[0], pages[0], QUERIES[1]], output="multi_vector")
        ranked = engine.multi_vector_rerank(QUERIES[1], pages)
        page_vectors = engine.encode(pages[1:3], output="multi_vector")
    assert_token_vectors([np.array(vectors) for vectors in answer.json()], expected, "/embed_all")
    assert_rerank_routes(server, QUERIES[1], pages, ranked)
    cohere_embed = post(server, "/v2/embed", {"images": [data_url(p) for p in pages[1:3]],
                                              "embedding_types": ["multi_vector_base64"]})
    assert cohere_embed.status_code == 200, cohere_embed.text
    width = page_vectors[0].shape[1]
    decoded = [np.frombuffer(base64.b64decode(s), "<f4").reshape(-1, width)
               for s in cohere_embed.json()["embeddings"]["multi_vector_base64"]]
    assert_token_vectors(decoded, page_vectors, "/v2/embed multi_vector_base64")


def test_pooled_routes_and_placeholders_are_refused(served):
    server, _, _ = served
    assert_pooled_routes_refused(server)
    assert_placeholder_refused(server, "<image>")
