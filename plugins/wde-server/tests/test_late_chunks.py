"""Late chunking on ``POST /v1/embeddings`` (``late_chunks``, ``late_overlap``) over a real socket: one embedding
per chunk, each with its input's index and character span, equal to the in-process ``Engine``'s
``encode(truncate="late")`` (itself checked against transformers in tests/test_late_chunking.py), and bad
requests refused with a 400 naming the field."""

from __future__ import annotations

import base64

import httpx
import numpy as np
import pytest

from wde_plugin_kit.corpus import minilm_path, wiki_paragraphs
from wde_core import Engine
from wde_core.plugin_api import late_chunk_spans
from wde_plugin_kit.serve import ServeProcess

TOL = 1e-6
DOC = "Late chunking reads the whole text first. Then it pools each chunk! Every chunk keeps its context."
MAX_LEN = 64  # the served length: the wiki paragraph below runs in windows


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    base = tmp_path_factory.mktemp("late")
    process = ServeProcess(str(minilm_path()), "--served-model-name", "minilm", "--engine-arg",
                           f"max_model_len={MAX_LEN}", log=base / "serve.log")
    yield process
    assert process.stop() == 0, process.log()


@pytest.fixture(scope="module")
def engine():
    built = Engine(str(minilm_path()), device="cpu", max_model_len=MAX_LEN)
    yield built
    built.close()


def post(server, body):
    return httpx.post(server.url + "/v1/embeddings", json={"model": "minilm", **body}, timeout=60)


def test_one_embedding_per_chunk_with_its_input_and_span(server, engine):
    long_doc = " ".join(wiki_paragraphs(3))
    assert len(engine.tokenizer.tokenizer(long_doc)["input_ids"]) > 2 * MAX_LEN
    answer = post(server, {"input": [DOC, long_doc], "late_chunks": "sentences", "late_overlap": 16})
    assert answer.status_code == 200, answer.text
    data = answer.json()["data"]
    expected = engine.encode([DOC, long_doc], truncate="late", chunks="sentences", late_overlap=16)
    spans = late_chunk_spans(engine, [DOC, long_doc], "sentences")
    assert [d["index"] for d in data] == list(range(len(spans[0]) + len(spans[1])))
    assert [(d["input_index"], tuple(d["span"])) for d in data] == [(i, s) for i in (0, 1) for s in spans[i]]
    assert np.abs(np.array([d["embedding"] for d in data]) - np.concatenate(expected)).max() <= TOL
    tokens = sum(len(r.token_ids) for r in engine.prepare("encode", [DOC, long_doc], truncate="late",
                                                          chunks="sentences", late_overlap=16).requests)
    assert answer.json()["usage"]["prompt_tokens"] == tokens  # every window's tokens


def test_spans_of_one_input_base64_and_dimensions(server, engine):
    spans = [[0, 41], [42, 67], [5, 30]]
    answer = post(server, {"input": DOC, "late_chunks": spans, "dimensions": 32, "encoding_format": "base64"})
    assert answer.status_code == 200, answer.text
    data = answer.json()["data"]
    got = np.stack([np.frombuffer(base64.b64decode(d["embedding"]), dtype="<f4") for d in data])
    expected = engine.encode(DOC, truncate="late", chunks=[tuple(s) for s in spans], dimensions=32)
    assert got.shape == (3, 32) and np.abs(got - expected).max() <= TOL
    assert [d["span"] for d in data] == spans and {d["input_index"] for d in data} == {0}
    per_input = post(server, {"input": [DOC, DOC], "late_chunks": [spans[:1], spans[1:]], "late_overlap": 0}).json()
    assert [d["input_index"] for d in per_input["data"]] == [0, 1, 1]
    ruled = post(server, {"input": DOC, "late_chunks": {"tokens": 4}}).json()["data"]
    assert np.abs(np.array([d["embedding"] for d in ruled]) - engine.encode(DOC, truncate="late",
                                                                             chunks={"tokens": 4})).max() <= TOL
    plain = post(server, {"input": DOC}).json()["data"]  # without late_chunks: one vector, no chunk fields
    assert len(plain) == 1 and set(plain[0]) == {"object", "index", "embedding"}


@pytest.mark.parametrize("body, param, text", [
    ({"input": DOC, "late_overlap": 3}, "late_overlap", "late_overlap: goes with late_chunks"),
    ({"input": [[101, 2000, 102]], "late_chunks": "sentences"}, "input",
     "input: late chunking (late_chunks) reads texts only"),
    ({"input": DOC, "late_chunks": [[0, 5], [5, 999]]}, "late_chunks",
     "late_chunks[1]=(5, 999): expected 0 <= start < end"),
    ({"input": [DOC, DOC], "late_chunks": [[0, 5]]}, "late_chunks", "late_chunks: one list of spans for 2 inputs"),
    ({"input": [DOC, DOC], "late_chunks": [[[0, 5]]]}, "late_chunks", "late_chunks: 1 span lists for 2 inputs"),
    ({"input": DOC, "late_chunks": [[0, 41], [41, 42]]}, "late_chunks",
     "late_chunks: input 0, chunk 1 (characters 41 to 42) holds no token's start"),
    ({"input": DOC, "late_chunks": {"sentences": 0}}, "late_chunks", "'sentences' takes a positive integer"),
    ({"input": DOC, "late_chunks": "sentences", "late_overlap": 62}, "late_overlap",
     "late_overlap=62: expected an integer from 0 to 61"),
    ({"input": DOC, "late_chunks": "paragraphs"}, "late_chunks", "late_chunks"),
    ({"input": DOC, "late_chunks": "sentences", "late_overlap": -1}, "late_overlap", "late_overlap"),
])
def test_bad_late_chunks_are_a_400_naming_the_field(server, body, param, text):
    answer = post(server, body)
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert text in error["message"], error
    assert error["param"] == param, error
    assert post(server, {"input": "still serving"}).status_code == 200
