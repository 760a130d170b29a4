"""A Qwen3-VL embedder over a real socket: ``wde serve`` answers ``/v1/embeddings`` and ``/v2/embed`` with texts, images
and text + image inputs in one list as ``Engine.encode`` does (the server reads the model's width from its text
config; the directory has a chat template, so inputs are chat-framed and ``input_type: search_query`` is the chat's
instruction, images included), and refuses ``dimensions`` past that width naming the field."""

from __future__ import annotations

import base64
import io
import json

import httpx
import numpy as np
import pytest

from qwen3_vl_builders import save_random_qwen3_vl
from wde_plugin_kit.image_builders import random_images
from wde_plugin_kit.vision_language import QWEN_VL_CHAT_TEMPLATE
from wde_core import Engine
from wde_plugin_kit.serve import ServeProcess

TOL = 1e-4
QUERY = "Retrieve images or text relevant to the user's query."


def data_url(picture) -> str:
    """``picture`` as a PNG data URL."""
    buffer = io.BytesIO()
    picture.save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """The running server, an in-process engine of the same directory and three pictures."""
    base = tmp_path_factory.mktemp("qwen3-vl-serving")
    directory = save_random_qwen3_vl(base / "qwen3-vl-tiny")
    (directory / "chat_template.json").write_text(json.dumps({"chat_template": QWEN_VL_CHAT_TEMPLATE}))
    (directory / "config_sentence_transformers.json").write_text(json.dumps({"prompts": {"query": QUERY}}))
    process = ServeProcess(str(directory), "--served-model-name", "qwen3-vl", log=base / "serve.log")
    with Engine(str(directory), device="cpu") as engine:
        yield process, engine, [p.convert("RGB") for p in random_images(3, seed=5)]
    assert process.stop() == 0, process.log()


def test_texts_images_and_pairs_are_served_as_encode_gives_them(served):
    server, engine, pictures = served
    urls = [data_url(p) for p in pictures]
    jina = httpx.post(server.url + "/v1/embeddings", timeout=60, json={"model": "qwen3-vl", "input": [
        "a chart of rainfall", {"image": urls[0]}, {"text": "what is shown here?", "image": urls[1]}]})
    assert jina.status_code == 200, jina.text
    expected = engine.encode(["a chart of rainfall", pictures[0], {"text": "what is shown here?", "image": pictures[1]}])
    np.testing.assert_allclose([d["embedding"] for d in jina.json()["data"]], expected, atol=TOL)
    image = {"type": "image_url", "image_url": {"url": urls[2]}}
    cohere = httpx.post(server.url + "/v2/embed", timeout=60, json={
        "model": "qwen3-vl", "input_type": "search_document", "embedding_types": ["float"],
        "inputs": [{"content": [{"type": "text", "text": "a page"}, image]}]})
    assert cohere.status_code == 200, cohere.text
    expected = engine.encode([{"text": "a page", "image": pictures[2]}])
    np.testing.assert_allclose(cohere.json()["embeddings"]["float"], expected, atol=TOL)


def test_a_query_input_type_is_the_chat_instruction(served):
    server, engine, pictures = served
    assert engine.pipeline.reasons["framing"].startswith("chat")
    image = {"type": "image_url", "image_url": {"url": data_url(pictures[0])}}
    cohere = httpx.post(server.url + "/v2/embed", timeout=60, json={
        "model": "qwen3-vl", "input_type": "search_query", "embedding_types": ["float"],
        "inputs": [{"content": [{"type": "text", "text": "rainfall"}]}, {"content": [image]}]})
    assert cohere.status_code == 200, cohere.text
    got = np.asarray(cohere.json()["embeddings"]["float"])
    np.testing.assert_allclose(got, engine.encode(["rainfall", pictures[0]], prompt=QUERY), atol=TOL)
    assert np.abs(got - engine.encode(["rainfall", pictures[0]])).max(axis=1).min() > 1e-3  # both took the instruction


def test_dimensions_past_the_decoder_width_are_refused_naming_the_field(served):
    server = served[0]
    refused = httpx.post(server.url + "/v1/embeddings", timeout=60,
                         json={"model": "qwen3-vl", "input": ["a"], "dimensions": 65})
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "dimensions", refused.text
    assert "embedding size 64" in refused.json()["error"]["message"], refused.text
