"""``wde serve`` as a real process over real sockets, driven by the official OpenAI and Cohere clients and
httpx: every response equals the in-process ``Engine`` result for the same inputs.

One server serves four models (an embedder, bge-m3, a reranker and a classifier) with int8/uint8
calibration; a second one requires an API key.
"""

from __future__ import annotations

import base64
import json

import httpx
import numpy as np
import pytest
from sentence_transformers.util.quantization import quantize_embeddings

from wde_plugin_kit.corpus import minilm_path, wiki_paragraphs
from wde_plugin_kit.encoders import save_bert_classifier
from wde_plugin_kit.serve import ServeProcess
from wde_core import Engine

openai = pytest.importorskip("openai")
TOL = 1e-6
TEXTS = ["The cat sat on the mat.", "A dog barked at the mailman", "Stock markets fell sharply on Monday.",
         "wde serves embeddings"]
QUERY, DOCS = "what do cats do?", ["Cats sleep most of the day.", "The stock market crashed.", "Cats purr.",
                                   "A recipe for bread"]


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory, m3_dir):
    base = tmp_path_factory.mktemp("served")
    return {"minilm": minilm_path(), "bge-m3": m3_dir,
            "reranker": save_bert_classifier(base / "reranker", num_labels=1, seed=1),
            "classifier": save_bert_classifier(base / "classifier", num_labels=3, seed=2)}


@pytest.fixture(scope="module")
def calibration_texts():
    return wiki_paragraphs(120)


@pytest.fixture(scope="module")
def server(model_dirs, calibration_texts, tmp_path_factory):
    base = tmp_path_factory.mktemp("server")
    calibration = base / "calibration.txt"
    calibration.write_text("\n".join(calibration_texts))
    args = [str(d) for d in model_dirs.values()]
    for name in model_dirs:
        args += ["--served-model-name", name]
    process = ServeProcess(*args, "--calibration", str(calibration), "--max-client-batch-size", "64",
                           "--payload-limit", "100000", log=base / "serve.log")
    yield process
    assert process.stop() == 0, process.log()


@pytest.fixture(scope="module")
def engines(model_dirs):
    built = {name: Engine(str(d), device="cpu") for name, d in model_dirs.items()}
    yield built
    for engine in built.values():
        engine.close()


def post(server, path, body, **kw):
    return httpx.post(server.url + path, json=body, timeout=60, **kw)


def test_openai_client_float_base64_dimensions_and_token_ids(server, engines):
    client = openai.OpenAI(api_key="unused", base_url=server.url + "/v1")
    reference = engines["minilm"].encode(TEXTS)
    as_float = client.embeddings.create(input=TEXTS, model="minilm", encoding_format="float")
    as_base64 = client.embeddings.create(input=TEXTS, model="minilm")  # the client asks for base64 and decodes
    for response in (as_float, as_base64):
        assert [d.index for d in response.data] == list(range(len(TEXTS)))
        np.testing.assert_allclose(np.array([d.embedding for d in response.data]), reference, atol=TOL)
    tokens = sum(len(engines["minilm"].tokenizer.tokenizer(t)["input_ids"]) for t in TEXTS)
    assert as_float.usage.prompt_tokens == as_float.usage.total_tokens == tokens
    short = client.embeddings.create(input=TEXTS[0], model="minilm", dimensions=128, encoding_format="float")
    np.testing.assert_allclose(short.data[0].embedding, engines["minilm"].encode(TEXTS[0], dimensions=128), atol=TOL)
    ids = engines["minilm"].tokenizer.tokenizer(TEXTS[:2])["input_ids"]  # with [CLS]/[SEP]: used as given
    by_ids = client.embeddings.create(input=ids, model="minilm", encoding_format="float")
    np.testing.assert_allclose([d.embedding for d in by_ids.data], reference[:2], atol=TOL)


def test_raw_base64_is_little_endian_float32(server, engines):
    body = post(server, "/v1/embeddings", {"input": TEXTS[1], "model": "minilm", "encoding_format": "base64"}).json()
    vector = np.frombuffer(base64.b64decode(body["data"][0]["embedding"]), dtype="<f4")
    np.testing.assert_allclose(vector, engines["minilm"].encode(TEXTS[1]), atol=TOL)


def test_cohere_embed_types_match_sentence_transformers_quantization(server, engines, calibration_texts):
    cohere = pytest.importorskip("cohere")
    client = cohere.ClientV2(api_key="unused", base_url=server.url)
    types = ["float", "int8", "uint8", "binary", "ubinary", "base64"]
    response = client.embed(texts=TEXTS, model="minilm", input_type="search_document", embedding_types=types)
    reference = engines["minilm"].encode(TEXTS)
    calibration = engines["minilm"].encode(calibration_texts)
    got = response.embeddings
    np.testing.assert_allclose(np.array(got.float_), reference, atol=TOL)
    for kind in ("int8", "uint8", "binary", "ubinary"):
        expected = quantize_embeddings(reference, precision=kind, calibration_embeddings=calibration)
        assert np.array_equal(np.array(getattr(got, kind)), expected), kind
    decoded = np.array([np.frombuffer(base64.b64decode(b), dtype="<f4") for b in got.base64])
    np.testing.assert_allclose(decoded, reference, atol=TOL)
    assert response.meta.billed_units.input_tokens > 0


def test_cohere_and_jina_rerank(server, engines):
    cohere = pytest.importorskip("cohere")
    expected = engines["reranker"].rerank(QUERY, DOCS, top_n=3)
    response = cohere.ClientV2(api_key="unused", base_url=server.url).rerank(model="reranker", query=QUERY,
                                                                             documents=DOCS, top_n=3)
    assert [r.index for r in response.results] == [e["index"] for e in expected]
    np.testing.assert_allclose([r.relevance_score for r in response.results], [e["score"] for e in expected],
                               atol=TOL)
    jina = post(server, "/v1/rerank", {"model": "reranker", "query": QUERY, "return_documents": True,
                                       "documents": [{"text": d} for d in DOCS]}).json()
    full = engines["reranker"].rerank(QUERY, DOCS)
    assert [(r["index"], r["document"]["text"]) for r in jina["results"]] == [(e["index"], DOCS[e["index"]])
                                                                              for e in full]
    assert jina["usage"]["total_tokens"] > 0


def test_tei_embed_similarity_and_left_truncation(server, engines):
    minilm = engines["minilm"]
    got = post(server, "/embed?model=minilm", {"inputs": TEXTS, "dimensions": 64}).json()
    np.testing.assert_allclose(got, minilm.encode(TEXTS, dimensions=64, normalize=True), atol=TOL)
    sims = post(server, "/similarity", {"inputs": {"source_sentence": TEXTS[0], "sentences": TEXTS[1:]}}).json()
    vectors = minilm.encode(TEXTS, normalize=True)
    np.testing.assert_allclose(sims, vectors[1:] @ vectors[0], atol=TOL)
    long_text = " ".join(wiki_paragraphs(6))
    left = post(server, "/embed", {"inputs": long_text, "truncate": True, "truncation_direction": "Left"}).json()
    st = pytest.importorskip("sentence_transformers").SentenceTransformer(str(minilm_path()), device="cpu")
    st.tokenizer.truncation_side = "left"
    np.testing.assert_allclose(left[0], st.encode(long_text), atol=1e-5)
    right = post(server, "/embed", {"inputs": long_text, "truncate": True}).json()
    np.testing.assert_allclose(right[0], minilm.encode(long_text, truncate=True), atol=TOL)


def test_tei_token_vectors_sparse_and_colbert(server, engines):
    got = post(server, "/embed_all?model=minilm", {"inputs": TEXTS[:2]}).json()
    for mine, ref in zip(got, engines["minilm"].embed_tokens(TEXTS[:2])):
        np.testing.assert_allclose(mine, ref, atol=TOL)
    m3 = engines["bge-m3"]
    sparse = post(server, "/embed_sparse?model=bge-m3", {"inputs": TEXTS[:2]}).json()
    for mine, ref in zip(sparse, m3.encode(TEXTS[:2], output="sparse")):
        assert [e["index"] for e in mine] == sorted(ref)
        np.testing.assert_allclose([e["value"] for e in mine], [ref[k] for k in sorted(ref)], atol=TOL)
    colbert = post(server, "/embed_all?model=bge-m3", {"inputs": TEXTS[:2]}).json()
    for mine, ref in zip(colbert, m3.encode(TEXTS[:2], output="colbert")):
        np.testing.assert_allclose(mine, ref, atol=TOL)
    dense = post(server, "/v1/embeddings", {"model": "bge-m3", "input": TEXTS[:2]}).json()
    np.testing.assert_allclose([d["embedding"] for d in dense["data"]], m3.encode(TEXTS[:2]), atol=TOL)
    both = post(server, "/v2/embed", {"model": "bge-m3", "texts": TEXTS[:2],  # wde's type: ColBERT vectors
                                      "embedding_types": ["float", "multi_vector"]}).json()["embeddings"]
    np.testing.assert_allclose(both["float"], m3.encode(TEXTS[:2]), atol=TOL)
    for mine, ref in zip(both["multi_vector"], m3.encode(TEXTS[:2], output="colbert")):
        np.testing.assert_allclose(mine, ref, atol=TOL)


def test_tei_rerank_predict_and_vllm_score_classify(server, engines):
    reranker, classifier = engines["reranker"], engines["classifier"]
    tei = post(server, "/rerank?model=reranker", {"query": QUERY, "texts": DOCS, "raw_scores": True,
                                                  "return_text": True}).json()
    expected = reranker.rerank(QUERY, DOCS, raw_scores=True)
    assert [(r["index"], r["text"]) for r in tei] == [(e["index"], DOCS[e["index"]]) for e in expected]
    np.testing.assert_allclose([r["score"] for r in tei], [e["score"] for e in expected], atol=TOL)
    scored = post(server, "/score", {"model": "reranker", "text_1": QUERY, "text_2": DOCS}).json()
    np.testing.assert_allclose([d["score"] for d in scored["data"]], reranker.score([(QUERY, d) for d in DOCS]),
                               atol=TOL)
    cosine = post(server, "/score", {"model": "minilm", "text_1": TEXTS[:2], "text_2": TEXTS[2:]}).json()
    vectors = engines["minilm"].encode(TEXTS, normalize=True)
    np.testing.assert_allclose([d["score"] for d in cosine["data"]], (vectors[:2] * vectors[2:]).sum(1), atol=TOL)
    labels = classifier.classify(TEXTS[:3])
    vllm = post(server, "/classify", {"model": "classifier", "input": TEXTS[:3]}).json()
    for item, probs in zip(vllm["data"], labels):
        assert item["label"] == max(probs, key=probs.get) and item["num_classes"] == 3
        np.testing.assert_allclose(item["probs"], list(probs.values()), atol=TOL)
    predicted = post(server, "/predict?model=classifier", {"inputs": [TEXTS[0], TEXTS[1]]}).json()  # one pair
    pair = classifier.classify((TEXTS[0], TEXTS[1]))
    assert [p["label"] for p in predicted] == sorted(pair, key=lambda k: -pair[k])
    np.testing.assert_allclose([p["score"] for p in predicted], sorted(pair.values(), reverse=True), atol=TOL)


def test_tokenize_decode_info_models_health_and_metrics(server, engines):
    tokenizer = engines["minilm"].tokenizer.tokenizer
    tokens = post(server, "/tokenize", {"inputs": "hello world"}).json()[0]
    assert [t["id"] for t in tokens] == tokenizer("hello world")["input_ids"]
    assert [t["special"] for t in tokens] == [True, False, False, True] and tokens[2]["start"] == 6
    assert post(server, "/decode", {"ids": tokenizer("hello world")["input_ids"]}).json() == ["hello world"]
    info = httpx.get(server.url + "/info?model=reranker").json()
    assert info["model_id"] == "reranker" and "reranker" in info["model_type"] and info["max_client_batch_size"] == 64
    models = httpx.get(server.url + "/v1/models").json()
    assert [m["id"] for m in models["data"]] == ["minilm", "bge-m3", "reranker", "classifier"]
    assert httpx.get(server.url + "/health").json()["status"] == "ok"
    response = post(server, "/v1/embeddings", {"model": "minilm", "input": TEXTS}, headers={"x-request-id": "abc"})
    assert response.headers["x-request-id"] == "abc"
    assert int(response.headers["x-compute-tokens"]) == response.json()["usage"]["total_tokens"]
    for header in ("x-queue-time", "x-inference-time", "x-total-time"):
        assert float(response.headers[header]) >= 0
    metrics = httpx.get(server.url + "/metrics").text
    for name in ("wde_requests_total", "wde_batch_size_bucket", "wde_batch_tokens_bucket", "wde_queue_size",
                 "wde_requests_in_flight", "wde_request_input_tokens_bucket",
                 "wde_request_inference_duration_seconds_bucket", "wde_request_total_duration_seconds_bucket"):
        assert name in metrics, name
    assert 'wde_requests_total{model="minilm",route="/v1/embeddings",status="200"}' in metrics
    assert httpx.get(server.url + "/docs").status_code == 200
    paths = httpx.get(server.url + "/openapi.json").json()["paths"]
    assert {"/v1/embeddings", "/v2/embed", "/v1/rerank", "/v2/rerank", "/embed", "/embed_sparse", "/embed_all",
            "/rerank", "/predict", "/similarity", "/tokenize", "/decode", "/info", "/health", "/score",
            "/classify", "/v1/models", "/metrics"} <= set(paths)


TOO_LONG = " ".join(["word"] * 400)
BAD_REQUESTS = [
    # (path, body or raw bytes, status, text the error must contain)
    ("/v1/embeddings", b"{not json", 400, "invalid JSON"),
    ("/v1/embeddings", {"input": 42, "model": "minilm"}, 400, "input"),
    ("/v1/embeddings", {"input": [], "model": "minilm"}, 400, "input: empty"),
    ("/v1/embeddings", {"input": ["ok", ""], "model": "minilm"}, 400, "input[1]: empty"),
    ("/v1/embeddings", {"input": ["x"] * 65, "model": "minilm"}, 413, "client batch limit of 64"),
    ("/v1/embeddings", {"input": ["ok", TOO_LONG], "model": "minilm"}, 422, "input[1] has 402 tokens"),
    ("/v1/embeddings", {"input": ["x" * 120_000], "model": "minilm"}, 413, "payload limit"),
    ("/v1/embeddings", {"input": [[101, 999999]], "model": "minilm"}, 400, "token id 999999"),
    ("/v1/embeddings", {"input": "ok", "model": "nope"}, 404, "served models: minilm, bge-m3"),
    ("/v1/embeddings", {"input": "ok", "model": "minilm", "dimensions": 9999}, 400, "dimensions"),
    ("/v1/embeddings", {"input": "ok", "model": "minilm", "encoding_format": "int4"}, 400, "encoding_format"),
    ("/v1/embeddings", {"input": "ok", "model": "minilm", "extra": 1}, 400, "extra"),
    ("/v1/rerank", {"model": "minilm", "query": "q", "documents": ["d"]}, 400, "its routes: /v1/embeddings"),
    ("/v1/embeddings", {"input": "ok", "model": "reranker"}, 400, "its routes: /v1/rerank"),
    ("/v2/rerank", {"model": "reranker", "query": "q", "documents": ["d"], "top_n": 0}, 400, "top_n"),
    ("/v2/embed", {"model": "minilm", "texts": ["a"], "embedding_types": ["int4"]}, 400, "embedding_types"),
    ("/embed", {"inputs": "ok", "truncation_direction": "Up"}, 422, "truncation_direction"),
    ("/embed", {"inputs": TOO_LONG}, 422, "inputs[0] has 402 tokens"),
    ("/embed", {"inputs": "ok", "prompt_name": "query"}, 422, "prompt_name"),
    ("/embed_sparse?model=minilm", {"inputs": "ok"}, 422, "its routes"),
    ("/predict?model=classifier", {"inputs": [["a", "b", "c"]]}, 422, "inputs[0]"),
    ("/decode", {"ids": [[-1]]}, 422, "token id -1"),
]


@pytest.mark.parametrize("path, body, status, text", BAD_REQUESTS, ids=[f"{b[0]}-{i}" for i, b in
                                                                        enumerate(BAD_REQUESTS)])
def test_bad_input_is_a_4xx_naming_the_field_and_the_server_keeps_serving(server, path, body, status, text):
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    response = httpx.post(server.url + path, content=content, headers={"content-type": "application/json"},
                          timeout=60)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    message = error if isinstance(error, str) else error["message"]
    assert text in message, message
    if path.split("?")[0] in ("/embed", "/embed_sparse", "/predict", "/decode"):
        assert response.json()["error_type"] == "Validation"  # TEI's shape
    else:
        assert set(error) == {"message", "type", "param", "code"}  # OpenAI's shape
    assert post(server, "/v1/embeddings", {"input": "still serving", "model": "minilm"}).status_code == 200


def test_the_port_opens_only_after_every_model_is_warmed_up(server):
    log = server.log()
    warmed = [log.index(f"model {name!r}") for name in ("minilm", "bge-m3", "reranker", "classifier")]
    assert max(warmed) < log.index("Uvicorn running on"), log


FIELDS = ["input", "inputs", "model", "texts", "query", "documents", "texts", "text_1", "text_2", "ids",
          "encoding_format", "dimensions", "embedding_types", "truncate", "top_n", "normalize", "raw_scores",
          "prompt_name", "truncation_direction", "output_dimension", "input_type", "return_documents"]
ROUTES = ["/v1/embeddings", "/v2/embed", "/v1/rerank", "/v2/rerank", "/embed", "/embed_sparse", "/embed_all",
          "/rerank", "/predict", "/similarity", "/tokenize", "/decode", "/score", "/classify"]


def test_fuzzed_bodies_never_get_a_5xx(server):
    hypothesis = pytest.importorskip("hypothesis")
    st = hypothesis.strategies
    leaves = (st.none() | st.booleans() | st.integers(-5, 40_000) | st.floats(allow_nan=False, allow_infinity=False)
              | st.text(max_size=30))
    values = st.recursive(leaves, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
        st.sampled_from(FIELDS + ["text"]), inner, max_size=3), max_leaves=12)
    bodies = st.dictionaries(st.sampled_from(FIELDS), values, max_size=5) | values
    models = st.sampled_from(["minilm", "bge-m3", "reranker", "classifier", "missing"])
    client = httpx.Client(timeout=60)

    @hypothesis.settings(max_examples=150, deadline=None, database=None,
                         suppress_health_check=list(hypothesis.HealthCheck))
    @hypothesis.given(route=st.sampled_from(ROUTES), body=bodies, model=models)
    def fuzz(route, body, model):
        response = client.post(f"{server.url}{route}?model={model}", json=body)
        assert response.status_code < 500, (route, body, response.text)
        response.json()

    fuzz()
    assert client.get(server.url + "/health").status_code == 200
