"""Token classification over a real socket: vLLM's ``/pooling`` (``task="token_classify"``) gives every token's
softmax (or logits) equal to HF's ``BertForTokenClassification``; ``/token_classification`` (the Inference API's
payload) gives the entities of transformers' token-classification pipeline for each aggregation strategy, stride
windows included; bad requests are refused naming the field, and an embedding model refuses these routes."""

from __future__ import annotations

import httpx
import numpy as np
import pytest
import torch
from transformers import AutoTokenizer, BertForTokenClassification, pipeline

from wde_plugin_kit.serve import ServeProcess
from wde_plugin_kit.token_classification import save_tiny_ner

LABELS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
TEXTS = ["My name is Sarah and I live in London.", "The quick brown foxes jumped over the lazy dogs!"]
LONG = "People ask questions; the system finds documents that answer them. " * 5


@pytest.fixture(scope="module")
def ner_dir(tmp_path_factory):
    """A random ``BertForTokenClassification`` (weights of std 0.3), 40 positions."""
    return save_tiny_ner(tmp_path_factory.mktemp("ner"), LABELS)


@pytest.fixture(scope="module")
def server(ner_dir, tmp_path_factory):
    process = ServeProcess(str(ner_dir), "--served-model-name", "ner",
                           log=tmp_path_factory.mktemp("ner-serve") / "serve.log")
    yield process
    assert process.stop() == 0, process.log()


@pytest.fixture(scope="module")
def reference(ner_dir):
    model = BertForTokenClassification.from_pretrained(ner_dir, attn_implementation="eager").eval()
    return model, pipeline("token-classification", model=model, tokenizer=AutoTokenizer.from_pretrained(ner_dir))


def post(server, route, body):
    return httpx.post(server.url + route, json=body, timeout=60)


@pytest.mark.parametrize("activation", [True, False])
def test_pooling_gives_every_tokens_probabilities_or_logits(server, reference, activation):
    model, ner = reference
    answer = post(server, "/pooling", {"model": "ner", "input": TEXTS, "task": "token_classify",
                                       "use_activation": activation})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["object"] == "list" and [d["index"] for d in body["data"]] == [0, 1]
    tokens = 0
    for text, item in zip(TEXTS, body["data"]):
        ids = ner.tokenizer(text)["input_ids"]
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([ids])).logits[0]
        expected = torch.softmax(logits, -1) if activation else logits
        assert np.abs(np.array(item["data"]) - expected.numpy()).max() <= 1e-4
        tokens += len(ids)
    assert body["usage"]["prompt_tokens"] == tokens


@pytest.mark.parametrize("strategy", ["none", "simple", "first", "average", "max"])
def test_token_classification_gives_the_pipelines_entities(server, reference, strategy):
    _, ner = reference
    answer = post(server, "/token_classification", {"inputs": TEXTS,
                                                    "parameters": {"aggregation_strategy": strategy}})
    assert answer.status_code == 200, answer.text
    assert len(answer.json()) == len(TEXTS)
    for ours, theirs in zip(answer.json(), ner(TEXTS, aggregation_strategy=strategy)):
        assert_same_entities(ours, theirs)


def test_one_string_in_one_list_out_and_stride_windows(server, reference):
    _, ner = reference
    single = post(server, "/token_classification", {"inputs": TEXTS[0]})
    assert single.status_code == 200 and isinstance(single.json(), list)
    assert_same_entities(single.json(), ner(TEXTS[0], aggregation_strategy="simple"))
    windows = post(server, "/token_classification", {"inputs": [LONG], "parameters": {
        "aggregation_strategy": "first", "stride": 6, "ignore_labels": []}})
    assert windows.status_code == 200, windows.text
    assert_same_entities(windows.json()[0], ner(LONG, aggregation_strategy="first", stride=6, ignore_labels=[]))


def assert_same_entities(ours, theirs) -> None:
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs):
        assert {k: v for k, v in a.items() if k != "score"} == {k: (v.item() if hasattr(v, "item") else v)
                                                                for k, v in b.items() if k != "score"}
        assert abs(a["score"] - float(b["score"])) <= 1e-4


@pytest.mark.parametrize("route,body,field", [
    ("/token_classification", {"inputs": TEXTS, "parameters": {"aggregation_strategy": "longest"}},
     "aggregation_strategy"),
    ("/token_classification", {"inputs": [LONG], "truncate": False}, "max_model_len"),
    ("/token_classification", {"inputs": TEXTS, "parameters": {"stride": 6, "aggregation_strategy": "none"}},
     "stride"),
    ("/pooling", {"input": TEXTS, "task": "embed"}, "task"),
    ("/pooling", {"input": TEXTS, "truncate_prompt_tokens": 5}, "truncate_prompt_tokens"),
])
def test_bad_requests_name_the_field(server, route, body, field):
    answer = post(server, route, body)
    assert answer.status_code in (400, 422), answer.text
    assert field in answer.text


def test_an_embedding_model_refuses_the_routes(tiny_st_bert_dir, tmp_path):
    process = ServeProcess(str(tiny_st_bert_dir), "--served-model-name", "emb", log=tmp_path / "serve.log")
    try:
        answer = post(process, "/token_classification", {"inputs": "hello"})
        assert answer.status_code == 400 and "/token_classification" in answer.text and "'embed'" in answer.text
    finally:
        assert process.stop() == 0, process.log()
