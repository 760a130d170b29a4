"""``wde serve`` request validation over a real socket: strict types (a JSON bool is not an int, a string
is neither an int nor a bool), error locations inside unions, ``output_dimension`` named as sent, and
lone surrogates refused with a 4xx naming the field, on every route, before any work."""

from __future__ import annotations

import json

import httpx
import pytest

from wde_plugin_kit.corpus import minilm_path
from wde_plugin_kit.serve import ServeProcess

TEI = ("/embed", "/embed_sparse", "/embed_all", "/rerank", "/predict", "/similarity", "/tokenize", "/decode")
TAGS = ("str", "list[", "function-", "DocumentText", "a list of", "a string")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    base = tmp_path_factory.mktemp("validation")
    process = ServeProcess(str(minilm_path()), "--served-model-name", "minilm", log=base / "serve.log")
    yield process
    assert process.stop() == 0, process.log()


def refused(server, path: str, body: dict) -> tuple[str, str | None]:
    """POST ``body`` (JSON with ASCII escapes, so lone surrogates travel as ``\\ud800``); check the 4xx and
    the route's error shape; return the message and the param (``None`` on TEI routes)."""
    response = httpx.post(server.url + path, content=json.dumps(body).encode(),
                          headers={"content-type": "application/json"}, timeout=60)
    tei = path in TEI
    assert response.status_code == (422 if tei else 400), response.text
    error = response.json()
    if tei:
        assert error["error_type"] == "Validation", error
        return error["error"], None
    assert set(error["error"]) == {"message", "type", "param", "code"}, error
    return error["error"]["message"], error["error"]["param"]


def refused_naming(server, path: str, body: dict, field: str) -> str:
    """The message of a refused request, which must begin with ``field: `` (and ``param`` be ``field``)."""
    message, param = refused(server, path, body)
    assert message.startswith(f"{field}: "), message
    assert param in (None, field), param
    return message


INT_FIELDS = [("/v1/embeddings", {"input": "hi"}, "dimensions"), ("/v2/embed", {"texts": ["hi"]}, "output_dimension"),
              ("/v1/rerank", {"query": "q", "documents": ["d"]}, "top_n"),
              ("/v2/rerank", {"query": "q", "documents": ["d"]}, "max_tokens_per_doc"),
              ("/embed", {"inputs": "hi"}, "dimensions")]
BOOL_FIELDS = [("/v1/rerank", {"query": "q", "documents": ["d"]}, "return_documents"),
               ("/embed", {"inputs": "hi"}, "normalize"), ("/embed", {"inputs": "hi"}, "truncate"),
               ("/embed_sparse", {"inputs": "hi"}, "truncate"), ("/embed_all", {"inputs": "hi"}, "normalize"),
               ("/rerank", {"query": "q", "texts": ["d"]}, "raw_scores"),
               ("/rerank", {"query": "q", "texts": ["d"]}, "return_text"),
               ("/predict", {"inputs": "hi"}, "raw_scores"),
               ("/similarity", {"inputs": {"source_sentence": "a", "sentences": ["b"]}}, "truncate"),
               ("/tokenize", {"inputs": "hi"}, "add_special_tokens"),
               ("/decode", {"ids": [101]}, "skip_special_tokens"),
               ("/score", {"text_1": "a", "text_2": "b"}, "truncate"), ("/classify", {"input": "a"}, "truncate")]
LOOSE = [(path, {**body, field: value}, field, "integer") for path, body, field in INT_FIELDS
         for value in (True, "5", 5.0)]
LOOSE += [(path, {**body, field: value}, field, "boolean") for path, body, field in BOOL_FIELDS
          for value in ("yes", 1, "false")]
INTEGER, MIXED = "Input should be a valid integer", "expected a string, an integer, a list or an object; got 101.0"
TOKEN_IDS = [("/v1/embeddings", {"input": [101, True]}, "input[1]", INTEGER),
             ("/v1/embeddings", {"input": [101.0]}, "input[0]", MIXED),
             ("/v1/embeddings", {"input": [[101, 102.0]]}, "input[0][1]", INTEGER),
             ("/embed", {"inputs": [101, True]}, "inputs[1]", INTEGER),
             ("/decode", {"ids": [101, True]}, "ids[1]", INTEGER),
             ("/decode", {"ids": [101.0]}, "ids[0]", "expected an integer or a list; got 101.0"),
             ("/decode", {"ids": [[101], [102, False]]}, "ids[1][1]", INTEGER)]


@pytest.mark.parametrize("path, body, field, expected", LOOSE, ids=[f"{p}-{f}-{b[f]!r}" for p, b, f, _ in LOOSE])
def test_int_and_bool_fields_take_only_their_json_type(server, path, body, field, expected):
    assert expected in refused_naming(server, path, body, field)


@pytest.mark.parametrize("path, body, field, expected", TOKEN_IDS, ids=[f"{p}-{f}" for p, _, f, _ in TOKEN_IDS])
def test_token_ids_are_json_integers_not_bools_or_floats(server, path, body, field, expected):
    assert refused_naming(server, path, body, field) == f"{field}: {expected}"


UNIONS = [("/v1/embeddings", {"input": ["a", 5]}, "input[1]", "expected a string or an object; got 5"),
          ("/v1/embeddings", {"input": [[101], [102, "x"]]}, "input[1][1]", "valid integer"),
          ("/v1/embeddings", {"input": [[101], "x"]}, "input[1]", "valid list"),
          ("/v1/embeddings", {"input": 42}, "input",
           "expected a string, a list of strings, a list of token ids, a list of token-id lists or a list of strings "
           "and objects; got 42"),
          ("/v1/rerank", {"query": "q", "documents": ["a", {"txt": "b"}]}, "documents[1].text", "Field required"),
          ("/v2/rerank", {"query": "q", "documents": ["a", {"text": 5}]}, "documents[1].text", "valid string"),
          ("/v2/rerank", {"query": "q", "documents": ["a", 5]}, "documents[1]",
           'expected a string or an object {"text": ...}; got 5'),
          ("/embed", {"inputs": ["a", None]}, "inputs[1]", "valid string"),
          ("/predict", {"inputs": [["a", 5]]}, "inputs[0][1]", "valid string"),
          ("/tokenize", {"inputs": ["a", ["b"]]}, "inputs[1]", "valid string"),
          ("/decode", {"ids": [[101], [102, "x"]]}, "ids[1][1]", "valid integer"),
          ("/score", {"text_1": ["a", 1], "text_2": "b"}, "text_1[1]", "valid string"),
          ("/classify", {"input": True}, "input", "expected a string or a list of strings; got true")]


@pytest.mark.parametrize("path, body, field, expected", UNIONS, ids=[f"{p}-{f}" for p, _, f, _ in UNIONS])
def test_a_bad_item_in_a_union_is_named_by_its_place_not_the_union_member(server, path, body, field, expected):
    message = refused_naming(server, path, body, field)
    assert expected in message, message
    assert not any(tag in message.split(":")[0] for tag in TAGS), message


def test_an_unknown_key_is_named_as_sent_even_a_lone_surrogate(server):
    message = refused_naming(server, "/v1/rerank", {"query": "q", "documents": [{"text": "a", "str": 1}]},
                             "documents[0].str")
    assert "Extra inputs" in message
    assert refused(server, "/v1/embeddings", {"input": "a", "k\ud800": 1})[0] == \
        "body: a key contains a lone surrogate (\\ud800 at character 1); send valid UTF-8 text"
    message = refused(server, "/similarity", {"inputs": {"source_sentence": "a", "sentences": ["b"], "\udfff": 1}})[0]
    assert message == "inputs: a key contains a lone surrogate (\\udfff at character 0); send valid UTF-8 text"


def test_output_dimension_over_the_model_size_is_named_output_dimension(server):
    message = refused_naming(server, "/v2/embed", {"texts": ["a"], "output_dimension": 9999}, "output_dimension")
    assert message == "output_dimension: 9999 exceeds the model's embedding size 384", message
    body = httpx.post(server.url + "/v2/embed", json={"texts": ["a"], "output_dimension": 384}, timeout=60).json()
    assert len(body["embeddings"]["float"][0]) == 384


BAD = "abc\ud800"
SURROGATES = [("/tokenize", {"inputs": ["ok", BAD]}, "inputs[1]"), ("/tokenize", {"inputs": BAD}, "inputs"),
              ("/v1/embeddings", {"input": BAD}, "input"), ("/v1/embeddings", {"input": ["ok", BAD]}, "input[1]"),
              ("/v1/embeddings", {"input": "ok", "model": BAD}, "model"),
              ("/v1/embeddings", {"input": "ok", "user": BAD}, "user"),
              ("/v2/embed", {"texts": [BAD]}, "texts[0]"),
              ("/v1/rerank", {"query": BAD, "documents": ["d"]}, "query"),
              ("/v1/rerank", {"query": "q", "documents": ["d", BAD]}, "documents[1]"),
              ("/v2/rerank", {"query": "q", "documents": [{"text": BAD}]}, "documents[0].text"),
              ("/embed", {"inputs": [BAD]}, "inputs[0]"),
              ("/embed", {"inputs": "ok", "prompt_name": BAD}, "prompt_name"),
              ("/embed_sparse", {"inputs": BAD}, "inputs"), ("/embed_all", {"inputs": [BAD]}, "inputs[0]"),
              ("/rerank", {"query": "q", "texts": ["d", BAD]}, "texts[1]"),
              ("/predict", {"inputs": [["a", BAD]]}, "inputs[0][1]"), ("/predict", {"inputs": BAD}, "inputs"),
              ("/similarity", {"inputs": {"source_sentence": BAD, "sentences": ["b"]}}, "inputs.source_sentence"),
              ("/similarity", {"inputs": {"source_sentence": "a", "sentences": ["b", BAD]}}, "inputs.sentences[1]"),
              ("/score", {"text_1": "a", "text_2": ["b", BAD]}, "text_2[1]"),
              ("/classify", {"input": [BAD]}, "input[0]")]


@pytest.mark.parametrize("path, body, field", SURROGATES, ids=[f"{p}-{f}" for p, _, f in SURROGATES])
def test_a_lone_surrogate_is_refused_naming_the_field_and_the_character(server, path, body, field):
    message = refused_naming(server, path, body, field)
    assert message == f"{field}: contains a lone surrogate (\\ud800 at character 3); send valid UTF-8 text", message


def test_a_surrogate_pair_is_one_valid_character_and_the_server_keeps_serving(server):
    tokens = httpx.post(server.url + "/tokenize", content=b'{"inputs": "a \\ud83d\\ude00"}',
                        headers={"content-type": "application/json"}, timeout=60)
    assert tokens.status_code == 200, tokens.text
    response = httpx.post(server.url + "/v1/embeddings", json={"input": "still serving", "dimensions": 8}, timeout=60)
    assert response.status_code == 200 and len(response.json()["data"][0]["embedding"]) == 8
