"""Learned sparse encoders over a real socket: ``wde serve`` of a SPLADE model and an inference-free Router model
(one process, two models) answers TEI's ``POST /embed_sparse`` with ``[{index, value}]`` per input equal to
``SparseEncoder.encode_query`` / ``encode_document`` (same non-zero ids, weights within 1e-4; ``prompt_name``
picks the Router's route); the dense routes give the vocabulary-sized vector; bad requests are refused naming the
field."""

from __future__ import annotations

import httpx
import numpy as np
import pytest

from test_splade import TEXTS, TOL, reference
from wde_plugin_kit.serve import ServeProcess
from splade_models import mlm_dir, splade_dir, router_dir  # noqa: F401 (fixtures)


@pytest.fixture(scope="module")
def server(splade_dir, router_dir, tmp_path_factory):
    process = ServeProcess(str(splade_dir), str(router_dir), "--served-model-name", "splade",
                           "--served-model-name", "router", log=tmp_path_factory.mktemp("splade-serve") / "serve.log")
    yield process
    assert process.stop() == 0, process.log()


def post(server, route, body, model=None):
    return httpx.post(server.url + route, params={"model": model} if model else None, json=body, timeout=60)


def assert_tei_sparse(answer, ref: np.ndarray) -> None:
    """TEI's form (``[{index, value}]`` by ascending index, non-zero only) with SparseEncoder's ids and weights."""
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert len(body) == len(ref)
    for got, want in zip(body, ref):
        assert all(set(item) == {"index", "value"} for item in got)
        ids = [item["index"] for item in got]
        assert ids == np.flatnonzero(want).tolist()  # ascending, exactly the non-zero ids
        assert np.abs(np.array([item["value"] for item in got]) - want[ids]).max() <= TOL


def test_embed_sparse_serves_splade(server, splade_dir):
    ref = reference(splade_dir, "document")
    assert (ref > 0).sum(axis=1).min() > 0
    assert_tei_sparse(post(server, "/embed_sparse", {"inputs": TEXTS, "truncate": True}), ref)  # the default model
    assert_tei_sparse(post(server, "/embed_sparse", {"inputs": TEXTS[0]}, model="splade"), ref[:1])
    assert_tei_sparse(post(server, "/embed_sparse", {"inputs": TEXTS[:2], "prompt_name": "query"}, model="splade"),
                      reference(splade_dir, "query", TEXTS[:2]))


@pytest.mark.parametrize("prompt_name", ["query", "document", None])
def test_embed_sparse_routes_the_router_by_prompt_name(server, router_dir, prompt_name):
    body = {"inputs": TEXTS, "truncate": True, **({"prompt_name": prompt_name} if prompt_name else {})}
    ref = reference(router_dir, prompt_name or "document")  # without a prompt name: the Router's default route
    assert_tei_sparse(post(server, "/embed_sparse", body, model="router"), ref)


def test_query_and_document_requests_at_once(server, router_dir):
    import concurrent.futures

    bodies = [{"inputs": TEXTS, "truncate": True, "prompt_name": kind} for kind in ("query", "document") * 3]
    with concurrent.futures.ThreadPoolExecutor(6) as pool:  # batched together by the engine's scheduler
        answers = list(pool.map(lambda body: post(server, "/embed_sparse", body, model="router"), bodies))
    refs = {kind: reference(router_dir, kind) for kind in ("query", "document")}
    for body, answer in zip(bodies, answers):
        assert_tei_sparse(answer, refs[body["prompt_name"]])


def test_dense_routes_give_the_vocabulary_sized_vector(server, splade_dir, router_dir):
    ref = reference(splade_dir, "document", TEXTS[:2])
    openai = post(server, "/v1/embeddings", {"model": "splade", "input": TEXTS[:2]})
    assert openai.status_code == 200, openai.text
    vectors = np.array([d["embedding"] for d in openai.json()["data"]])
    assert vectors.shape == ref.shape and np.abs(vectors - ref).max() <= TOL  # not normalized: the model's default
    tei = np.array(post(server, "/embed", {"inputs": TEXTS[:2]}, model="splade").json())  # TEI normalizes
    np.testing.assert_allclose(tei, ref / np.linalg.norm(ref, axis=1, keepdims=True), atol=TOL)
    for input_type, kind in (("search_query", "query"), ("search_document", "document")):  # Cohere: the route
        cohere = post(server, "/v2/embed", {"model": "router", "texts": TEXTS[:2], "input_type": input_type})
        assert cohere.status_code == 200, cohere.text
        assert np.abs(np.array(cohere.json()["embeddings"]["float"])
                      - reference(router_dir, kind, TEXTS[:2])).max() <= TOL
    models = {m["model_id"]: m for m in httpx.get(server.url + "/info", timeout=60).json()["models"]}
    assert [models[name]["outputs"] for name in ("splade", "router")] == [["sparse", "dense"]] * 2
    assert models["router"]["prompts"] == ["document", "query"]


@pytest.mark.parametrize("route, body, status, param, text", [
    ("/embed_sparse", {"inputs": ["ok"], "prompt_name": "passage"}, 422, "prompt_name",  # TEI: 422
     "prompt_name: 'passage' is not among the model's prompts (document, query)"),
    ("/embed_sparse", {"inputs": ["ok", ""], "prompt_name": "query"}, 422, "inputs", "inputs[1]: empty string"),
    ("/embed_sparse", {"inputs": [[2, 100, 3]], "prompt_name": "query"}, 422, "prompt_name",  # not the MLM route
     "prompt_name: 'query' applies to texts; inputs are token ids"),
    ("/embed_sparse", {"inputs": ["word " * 100]}, 422, "inputs", "inputs[0] has 102 tokens, more than the model's "
                                                                    "limit of 64"),
    ("/v1/embeddings", {"model": "router", "input": "ok", "dimensions": 8}, 400, "dimensions",
     "dimensions=8: a sparse encoder's vectors span the vocabulary"),
])
def test_bad_requests_are_refused_naming_the_field(server, route, body, status, param, text):
    answer = post(server, route, body, model="router" if route != "/v1/embeddings" else None)
    assert answer.status_code == status, answer.text
    assert text in answer.text and param in answer.text
