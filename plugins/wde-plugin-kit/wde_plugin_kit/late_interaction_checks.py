"""The checks ColPali, ColQwen2 and ColQwen2.5 tests share (wde-paligemma's and wde-qwen2-vl's): transformers'
``*ForRetrieval`` token vectors of each query or page alone as the reference, queries and pages interleaved, MaxSim
scores against the processor's ``score_retrieval``, a full-resolution page at the real model's widths, and the
serving routes' answers (``/v2/rerank``, ``/rerank``, refused pooled routes) against the engine's."""

from __future__ import annotations

import base64
import io

import numpy as np

QUERIES = ["what is the revenue in 2023?", "a chart of rainfall by month", "who signed the treaty"]
TOL = 1e-4  # fp32: every token vector and score


def load_retriever(directory, family: str, attention: str = "eager"):
    """``(directory, model, processor)``: transformers' ``{family}ForRetrieval`` in fp32 (``attention``) and its
    ``{family}Processor`` from a saved ``directory`` (``family``: ``ColPali`` or ``ColQwen2``)."""
    import torch
    import transformers

    model = getattr(transformers, f"{family}ForRetrieval").from_pretrained(directory, dtype=torch.float32,
                                                                          attn_implementation=attention)
    return directory, model.eval(), getattr(transformers, f"{family}Processor").from_pretrained(directory)


def reference_vectors(reference, processor, items) -> list[np.ndarray]:
    """transformers' embeddings of each query or page alone (no padding), ``[tokens, dim]`` each."""
    import torch

    out = []
    for item in items:
        inputs = processor.process_queries([item]) if isinstance(item, str) else processor.process_images([item])
        with torch.no_grad():
            out.append(reference(**inputs).embeddings[0].numpy())
    return out


def interleaved(pages) -> list:
    """The three queries and six pages in one list, queries between pages."""
    return [QUERIES[0], pages[0], pages[1], QUERIES[1], pages[2], pages[3], pages[4], QUERIES[2], pages[5]]


def assert_token_vectors(got, expected, label: str = "") -> float:
    """Each input's ``[tokens, dim]`` vectors within ``TOL`` of the reference's; returns (and prints) the worst."""
    assert [np.shape(g) for g in got] == [e.shape for e in expected]
    worst = max(float(np.abs(np.asarray(g) - e).max()) for g, e in zip(got, expected))
    print(f"{label}: max abs diff {worst:.2e} over {sum(len(e) for e in expected)} token vectors")
    assert worst <= TOL
    return worst


def min_token_cosine(got, expected) -> float:
    """The lowest cosine of a token vector with the reference's (both L2-normalized), over every input."""
    return min(float((g * e).sum(1).min()) for g, e in zip(got, expected))


def score_retrieval(processor, queries, docs) -> np.ndarray:
    """The processor's ``score_retrieval`` (MaxSim) of reference vectors, ``[queries, docs]``."""
    import torch

    return processor.score_retrieval([torch.from_numpy(q) for q in queries],
                                     [torch.from_numpy(d) for d in docs]).numpy()


def assert_scores_and_ranking(scores, one, ranked, expected) -> None:
    """``multi_vector_scores`` of the three queries and of ``QUERIES[1]`` alone, and ``multi_vector_rerank``'s top 3
    for ``QUERIES[1]``, against the reference's four-page scores."""
    print(f"MaxSim: max abs diff {np.abs(scores - expected).max():.2e} (scores span {np.ptp(expected):.3f})")
    assert scores.shape == (3, 4) and np.abs(scores - expected).max() <= TOL
    assert np.abs(one - expected[1]).max() <= TOL
    assert [r["index"] for r in ranked] == sorted(range(4), key=lambda i: -expected[1][i])[:3]
    assert np.ptp(expected[1]) > 1e-3  # distinct scores: the order can be wrong


def full_page_vectors(directory, family: str):
    """``(wde's, transformers' sdpa)`` token vectors of a random 850 x 1100 page and ``QUERIES[0]`` for a model saved
    at a real checkpoint's widths (``family`` as :func:`load_retriever`)."""
    from PIL import Image

    from wde_core.plugin_api import Engine

    _, reference, processor = load_retriever(directory, family, attention="sdpa")
    page = Image.fromarray(np.random.default_rng(0).integers(0, 256, (1100, 850, 3), dtype=np.uint8))
    expected = reference_vectors(reference, processor, [page, QUERIES[0]])
    with Engine(str(directory), device="cpu") as engine:
        got = engine.encode([page, QUERIES[0]], output="multi_vector")
    return got, expected


def data_url(picture) -> str:
    """``picture`` as a PNG data URL."""
    buffer = io.BytesIO()
    picture.save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def post(server, route, body):
    """POST ``body`` as JSON to a running server's ``route``."""
    import httpx

    return httpx.post(server.url + route, json=body, timeout=60)


def assert_rerank_routes(server, query: str, pages, ranked) -> None:
    """Cohere's ``/v2/rerank`` (top 3) and TEI's ``/rerank`` rank ``pages`` (as data URLs) as ``ranked`` (the engine's
    ``multi_vector_rerank``) does, with its scores."""
    cohere = post(server, "/v2/rerank", {"query": query, "documents": [data_url(p) for p in pages], "top_n": 3})
    assert cohere.status_code == 200, cohere.text
    results = cohere.json()["results"]
    assert [r["index"] for r in results] == [r["index"] for r in ranked[:3]]
    assert max(abs(r["relevance_score"] - e["score"]) for r, e in zip(results, ranked)) <= TOL
    tei = post(server, "/rerank", {"query": query, "texts": [data_url(p) for p in pages]})
    assert tei.status_code == 200, tei.text
    assert [r["index"] for r in tei.json()] == [r["index"] for r in ranked]


def assert_pooled_routes_refused(server) -> None:
    """A pooled-vector route answers 400 naming the routes a multi-vector model serves."""
    answer = post(server, "/v1/embeddings", {"input": QUERIES[:2]})
    assert answer.status_code == 400 and "/embed_all" in answer.text and "/v2/rerank" in answer.text


def assert_placeholder_refused(server, placeholder: str) -> None:
    """A query holding the image ``placeholder`` token is refused naming it; the server still serves."""
    bad = post(server, "/embed_all", {"inputs": ["fine", f"{placeholder} sneaky"]})
    assert bad.status_code in (400, 422) and "placeholder token" in bad.text
    assert post(server, "/embed_all", {"inputs": ["still serving"]}).status_code == 200
