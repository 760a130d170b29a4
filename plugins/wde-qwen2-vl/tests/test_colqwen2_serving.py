"""ColQwen2 and a Qwen2-VL embedder over a real socket: one ``wde serve`` process serves a random ColQwen2 (the default
model) and a random Qwen2-VL embedder with a query instruction.

ColQwen2 answers TEI's ``/embed_all`` and Cohere's ``/v2/embed`` (``embedding_types`` ``multi_vector`` and
``multi_vector_base64``) with every token's vector (queries as text, pages as ``data:image/png;base64,`` URLs) equal to
``Engine.encode(output="multi_vector")``, and ``/v2/rerank`` (Cohere) and ``/rerank`` (TEI) rank page images by MaxSim
as ``multi_vector_rerank`` does; pooled-vector routes and types are refused naming the ones it serves. The Qwen2-VL
embedder answers ``/v1/embeddings`` and ``/v2/embed`` with texts, images and text + image inputs in one list, as
``Engine.encode`` does."""

from __future__ import annotations

import base64
import json

import httpx
import numpy as np
import pytest

from wde_core import Engine
from wde_plugin_kit.image_builders import random_images
from wde_plugin_kit.late_interaction_checks import (QUERIES, TOL, assert_placeholder_refused,
                                                    assert_pooled_routes_refused, assert_rerank_routes,
                                                    assert_token_vectors, data_url, post)
from wde_plugin_kit.serve import ServeProcess
from wde_plugin_kit.vision_language import save_random_colqwen2, save_random_qwen2_vl

QUERIES = QUERIES[:2]  # two queries here, as the pooled-route check sends
INSTRUCTION = "Find the image that matches: "  # a GME/DSE-style query instruction, the embedder's "query" prompt


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """The running server, the two model directories and four pages."""
    base = tmp_path_factory.mktemp("vl-serving")
    colqwen2 = save_random_colqwen2(base / "colqwen2-tiny")
    embedder = save_random_qwen2_vl(base / "qwen2-vl-tiny")
    (embedder / "config_sentence_transformers.json").write_text(json.dumps({"prompts": {"query": INSTRUCTION}}))
    process = ServeProcess(str(colqwen2), str(embedder), "--served-model-name", "colqwen2", "--served-model-name",
                           "qwen2-vl", log=base / "serve.log")
    yield process, {"colqwen2": colqwen2, "qwen2-vl": embedder}, [p.convert("RGB") for p in random_images(4, seed=3)]
    assert process.stop() == 0, process.log()


@pytest.fixture(scope="module")
def engines(served):
    """In-process engines of the served directories."""
    built = {name: Engine(str(directory), device="cpu") for name, directory in served[1].items()}
    yield built
    for engine in built.values():
        engine.close()


def test_embed_all_gives_every_token_vector_of_queries_and_pages(served, engines):
    server, _, pages = served
    answer = post(server, "/embed_all", {"inputs": [QUERIES[0], data_url(pages[0]), QUERIES[1]]})
    assert answer.status_code == 200, answer.text
    expected = engines["colqwen2"].encode([QUERIES[0], pages[0], QUERIES[1]], output="multi_vector")
    assert_token_vectors(answer.json(), expected)


def test_v2_embed_gives_token_vectors_as_floats_and_base64(served, engines):
    cohere = pytest.importorskip("cohere")
    server, _, pages = served
    client = cohere.ClientV2(api_key="unused", base_url=server.url)
    got = client.embed(model="colqwen2", input_type="image", images=[data_url(p) for p in pages[:2]],
                       embedding_types=["multi_vector", "multi_vector_base64"]).embeddings.model_extra
    expected = engines["colqwen2"].encode(pages[:2], output="multi_vector")
    assert_token_vectors(got["multi_vector"], expected)
    width = {m["model_id"]: m["vector_size"] for m in httpx.get(server.url + "/info").json()["models"]}["colqwen2"]
    assert width == expected[0].shape[1]
    decoded = [np.frombuffer(base64.b64decode(s), dtype="<f4").reshape(-1, width) for s in got["multi_vector_base64"]]
    assert_token_vectors(decoded, expected)
    queries = client.embed(model="colqwen2", input_type="search_query", texts=QUERIES, embedding_types=["multi_vector"])
    assert_token_vectors(queries.embeddings.model_extra["multi_vector"],
                         engines["colqwen2"].encode(QUERIES, output="multi_vector"))
    mixed = post(server, "/v2/embed", {"inputs": [{"content": [{"type": "text", "text": QUERIES[0]}]},
                                                  {"content": [{"type": "image_url",
                                                                "image_url": {"url": data_url(pages[2])}}]}],
                                       "embedding_types": ["multi_vector"]})
    assert mixed.status_code == 200, mixed.text
    assert_token_vectors(mixed.json()["embeddings"]["multi_vector"],
                         engines["colqwen2"].encode([QUERIES[0], pages[2]], output="multi_vector"))


def test_rerank_routes_rank_pages_by_maxsim(served, engines):
    server, _, pages = served
    assert_rerank_routes(server, QUERIES[1], pages, engines["colqwen2"].multi_vector_rerank(QUERIES[1], pages))
    image_query = post(server, "/v2/rerank", {"query": data_url(pages[0]), "documents": [data_url(pages[1])]})
    assert image_query.status_code == 400 and image_query.json()["error"]["param"] == "query", image_query.text
    assert "send the query as text" in image_query.text


def test_pooled_vector_routes_and_types_are_refused_naming_the_served_ones(served):
    server, _, _ = served
    assert_pooled_routes_refused(server)
    for body, field, text in [({"texts": QUERIES, "embedding_types": ["multi_vector", "float"]}, "embedding_types",
                               "'multi_vector' or 'multi_vector_base64'"),
                              ({"texts": QUERIES, "embedding_types": ["multi_vector"], "output_dimension": 8},
                               "output_dimension", "not Matryoshka-trained")]:
        refused = post(server, "/v2/embed", body)
        assert refused.status_code == 400 and refused.json()["error"]["param"] == field, refused.text
        assert text in refused.json()["error"]["message"]
    assert_placeholder_refused(server, "<|image_pad|>")


def test_qwen2_vl_embedder_embeds_texts_images_and_pairs(served, engines):
    cohere = pytest.importorskip("cohere")
    server, _, pages = served
    urls = [data_url(p) for p in pages]
    engine = engines["qwen2-vl"]
    jina = post(server, "/v1/embeddings", {"model": "qwen2-vl", "input": [
        QUERIES[0], {"image": urls[0]}, {"text": QUERIES[1], "image": urls[1]}, {"text": "a page"}]})
    assert jina.status_code == 200, jina.text
    expected = engine.encode([QUERIES[0], pages[0], {"text": QUERIES[1], "image": pages[1]}, "a page"])
    np.testing.assert_allclose([d["embedding"] for d in jina.json()["data"]], expected, atol=TOL)
    client = cohere.ClientV2(api_key="unused", base_url=server.url)
    parts = [[cohere.TextEmbedContent(text=QUERIES[0])],
             [cohere.ImageUrlEmbedContent(image_url=cohere.EmbedImageUrl(url=urls[2]))],
             [cohere.TextEmbedContent(text=QUERIES[1]),
              cohere.ImageUrlEmbedContent(image_url=cohere.EmbedImageUrl(url=urls[3]))]]
    mixed = client.embed(model="qwen2-vl", input_type="search_query", embedding_types=["float", "base64"],
                         inputs=[cohere.EmbedInput(content=content) for content in parts])
    expected = engine.encode([QUERIES[0], pages[2], {"text": QUERIES[1], "image": pages[3]}], prompt_name="query")
    np.testing.assert_allclose(mixed.embeddings.float_, expected, atol=TOL)
    assert np.abs(expected[0] - engine.encode(QUERIES[0])).max() > 1e-3  # search_query: the instruction counted
    decoded = [np.frombuffer(base64.b64decode(s), dtype="<f4") for s in mixed.embeddings.base64]
    np.testing.assert_allclose(decoded, expected, atol=TOL)
    assert mixed.texts == QUERIES and mixed.meta.billed_units.images == 2
    images = client.embed(model="qwen2-vl", input_type="image", images=urls[:2], embedding_types=["float"])
    np.testing.assert_allclose(images.embeddings.float_, engine.encode(pages[:2]), atol=TOL)


def test_qwen2_vl_embedder_refuses_bad_inputs_naming_the_field(served):
    server, _, pages = served
    url, text = data_url(pages[0]), {"type": "text", "text": "a"}
    image = {"type": "image_url", "image_url": {"url": url}}
    for route, body, field, message in [
        ("/v2/embed", {"inputs": [{"content": [text]}, {"content": [text, image, image]}]}, "inputs[1].content",
         "one text and one image"),
        ("/v2/embed", {"texts": ["a"], "output_dimension": 65}, "output_dimension", "embedding size 64"),
        ("/v1/embeddings", {"input": ["a"], "dimensions": 65}, "dimensions", "embedding size 64"),
        ("/v2/embed", {"texts": ["a"], "embedding_types": ["multi_vector"]}, "embedding_types", "every token's vector"),
        ("/v1/embeddings", {"input": [{"text": "a", "image": "data:image/png;base64,!!"}]}, "input[0].image",
         "does not decode"),
    ]:
        refused = post(server, route, {"model": "qwen2-vl", **body})
        assert refused.status_code == 400 and refused.json()["error"]["param"] == field, refused.text
        assert message in refused.json()["error"]["message"], refused.text
