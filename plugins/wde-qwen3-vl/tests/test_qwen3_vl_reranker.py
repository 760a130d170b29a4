"""Qwen3-VL-Reranker against transformers' ``Qwen3VLForConditionalGeneration``: (query, document) pairs of texts,
images and text + image sides, each laid out by hand as the official script's chat template renders it (system turn,
``<Instruct>: ...<Query>:...\\n<Document>:...`` in the user turn, a side's image before its text, ``NULL`` for an
empty side, the assistant's header), scored sigmoid(logit("yes") - logit("no")) of the last token, within 1e-4 in
fp32; an untied language-model head and one tied to the embeddings; refusals."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from qwen3_vl_builders import save_random_qwen3_vl
from wde_plugin_kit.image_builders import random_images
from test_qwen3_vl_embedder import VISION, Processor
from wde_core import Engine

SYSTEM = ("Judge whether the Document meets the requirements based on the Query and the Instruct provided. Note that "
          "the answer can only be \"yes\" or \"no\".")
TASK = "Given a search query, retrieve relevant candidates that answer the query."


def prompt(query: str, document: str, instruction: str = TASK) -> str:
    """The official layout, by hand (``query``/``document`` already hold a side's vision placeholder)."""
    return (f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n<Instruct>: {instruction}<Query>:{query}"
            f"\n<Document>:{document}<|im_end|>\n<|im_start|>assistant\n")


@pytest.fixture(scope="module", params=[False, True], ids=["untied-head", "tied-head"])
def reranker(request, tmp_path_factory):
    """A random Qwen3-VL whose tokenizer has "yes" and "no", saved under a Qwen3-VL-Reranker name; transformers'
    model with its language-model head; the reference layout."""
    from transformers import Qwen3VLForConditionalGeneration

    directory = save_random_qwen3_vl(tmp_path_factory.mktemp("qwen3-vl-rr") / "qwen3-vl-reranker-tiny",
                                     extra_tokens=("yes", "no"), tie_word_embeddings=request.param)
    model = Qwen3VLForConditionalGeneration.from_pretrained(directory, dtype=torch.float32,
                                                            attn_implementation="eager").eval()
    return directory, model, Processor(directory)


def reference_score(model, processor, text: str, image=None) -> float:
    """sigmoid(logit("yes") - logit("no")) at the last token."""
    yes, no = processor.tokenizer.convert_tokens_to_ids(["yes", "no"])
    with torch.no_grad():
        logits = model(**processor(text, image)).logits[0, -1]
    return float(torch.sigmoid(logits[yes] - logits[no]))


def test_pairs_of_texts_and_images_score_as_the_reference(reranker):
    directory, model, processor = reranker
    page, photo = random_images(2, seed=21)
    pairs = [("rainfall by month", "A table of monthly rainfall."), ("rainfall by month", page),
             ("what is this?", {"text": "a chart", "image": page}), (photo, "a dog in the snow"),
             ({"text": "find similar", "image": photo}, "")]
    layouts = [(prompt("rainfall by month", "A table of monthly rainfall."), None),
               (prompt("rainfall by month", VISION), page), (prompt("what is this?", VISION + "a chart"), page),
               (prompt(VISION, "a dog in the snow"), photo), (prompt(VISION + "find similar", "NULL"), photo)]
    expected = np.array([reference_score(model, processor, text, image) for text, image in layouts])
    with Engine(str(directory), task="rerank", device="cpu") as engine:
        assert engine.pipeline.workflow.name == "qwen3-vl-rerank"
        got = engine.score(pairs)
        ranked = engine.rerank("rainfall by month", ["A table of monthly rainfall.", page])
    print(f"max abs diff {np.abs(got - expected).max():.2e}; scores {np.round(expected, 4)}")
    assert np.abs(got - expected).max() <= 1e-4 and expected.std() > 1e-3
    assert [r["index"] for r in ranked] == list(np.argsort(-expected[:2], kind="stable"))
    with Engine(str(directory), task="rerank", device="cpu", instruction="Find the page.") as engine:
        got = engine.score([pairs[1]])[0]
    assert abs(got - reference_score(model, processor, prompt("rainfall by month", VISION, "Find the page."),
                                     page)) <= 1e-4


def two_image_inputs(processor, text: str, images: list) -> dict:
    """The layout of a prompt holding several images (``Qwen3VLProcessor``'s): every image through the image
    processor, each placeholder repeated per merged 2x2 block of its own image, in order."""
    inputs = dict(processor.images(images=images, return_tensors="pt"))
    for grid in inputs["image_grid_thw"]:
        text = text.replace("<|image_pad|>", "\x01" * (int(grid.prod()) // processor.images.merge_size ** 2), 1)
    inputs["input_ids"] = processor.tokenizer([text.replace("\x01", "<|image_pad|>")], return_tensors="pt")["input_ids"]
    inputs["mm_token_type_ids"] = (inputs["input_ids"] == processor.image_token_id).int()
    return inputs


def test_a_pair_of_two_images_scores_as_the_reference(reranker):
    directory, model, processor = reranker
    query_image, page = random_images(2, seed=24)
    yes, no = processor.tokenizer.convert_tokens_to_ids(["yes", "no"])
    with torch.no_grad():
        logits = model(**two_image_inputs(processor, prompt(VISION + "like this", VISION), [query_image, page])).logits
    expected = float(torch.sigmoid(logits[0, -1, yes] - logits[0, -1, no]))
    with Engine(str(directory), task="rerank", device="cpu") as engine:
        got = engine.score([({"text": "like this", "image": query_image}, page), ("a text", page)])
    assert abs(got[0] - expected) <= 1e-4
    assert abs(got[1] - reference_score(model, processor, prompt("a text", VISION), page)) <= 1e-4


def test_a_long_document_is_cut_and_bad_pairs_are_refused(reranker):
    directory, model, processor = reranker
    page = random_images(1, seed=22)[0]
    long_text = " ".join(["the quick brown fox jumps over the lazy dog"] * 40)
    with Engine(str(directory), task="rerank", device="cpu", max_model_len=160) as engine:
        got = engine.score([("a fox", long_text)])[0]
        with pytest.raises(ValueError, match="input 0: the formatted pair has .* tokens, more than max_model_len=160"):
            engine.score([("a fox", long_text)], truncate=False)
        with pytest.raises(ValueError, match="input 1: field 'image' is not an image file"):
            engine.score([("a", "b"), (page, b"not an image")])
        with pytest.raises(TypeError, match="input 0: field 'document' must be a str, an image or a"):
            engine.score([("a", 3)])
        with pytest.raises(ValueError, match="input 0: the document contains the placeholder token"):
            engine.score([("a", "<|image_pad|>")])
        with pytest.raises(ValueError, match="input 0 \\(query\\): field 'image' is not an image file"):
            engine.score([(b"not an image", "b")])
    with pytest.raises(ValueError, match="engine argument instruction: contains the placeholder token"):
        Engine(str(directory), task="rerank", device="cpu", instruction="<|image_pad|>")
    tokenizer = processor.tokenizer
    head, tail = prompt("a fox", "\x00").split("\x00")
    head_ids, tail_ids = (tokenizer(part, add_special_tokens=False)["input_ids"] for part in (head, tail))
    kept = tokenizer(long_text, add_special_tokens=False)["input_ids"][: 160 - len(head_ids) - len(tail_ids)]
    yes, no = tokenizer.convert_tokens_to_ids(["yes", "no"])
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([head_ids + kept + tail_ids]),
                       mm_token_type_ids=torch.zeros(1, 160, dtype=torch.int)).logits[0, -1]
    assert abs(got - float(torch.sigmoid(logits[yes] - logits[no]))) <= 1e-4


def test_wde_serve_ranks_image_documents_as_rerank_does(reranker, tmp_path):
    """Over a real socket: ``/v2/rerank`` reads ``data:image/...`` documents as images, as ``Engine.rerank`` ranks
    them; a text-only request stays under ``--payload-limit``."""
    import httpx
    from test_qwen3_vl_serving import data_url
    from wde_plugin_kit.serve import ServeProcess

    directory = reranker[0]
    page, photo = random_images(2, seed=23)
    limit = page.width * page.height + photo.width * photo.height  # the ranking request's images, no more
    server = ServeProcess(str(directory), "--served-model-name", "vl-rerank", "--engine-arg", "task=rerank",
                          "--payload-limit", "4096", "--max-request-pixels", str(limit), log=tmp_path / "serve.log")
    try:
        documents = ["A table of monthly rainfall.", data_url(page), "a dog in the snow", data_url(photo)]
        answer = httpx.post(server.url + "/v2/rerank", timeout=60, json={
            "model": "vl-rerank", "query": "rainfall by month", "documents": documents})
        assert answer.status_code == 200, answer.text
        with Engine(str(directory), task="rerank", device="cpu") as engine:
            expected = engine.rerank("rainfall by month", ["A table of monthly rainfall.", page.convert("RGB"),
                                                           "a dog in the snow", photo.convert("RGB")])
        got = answer.json()["results"]
        assert [r["index"] for r in got] == [r["index"] for r in expected]
        np.testing.assert_allclose([r["relevance_score"] for r in got], [r["score"] for r in expected], atol=1e-4)
        too_big = httpx.post(server.url + "/v2/rerank", timeout=60, json={
            "model": "vl-rerank", "query": "q", "documents": ["x" * 5000]})
        assert too_big.status_code == 413 and "--payload-limit" in too_big.text, too_big.text
        too_many = httpx.post(server.url + "/v2/rerank", timeout=60, json={
            "model": "vl-rerank", "query": "q", "documents": [data_url(page), data_url(photo), data_url(photo)]})
        assert too_many.status_code == 413 and "documents[2]" in too_many.text, too_many.text
        broken = httpx.post(server.url + "/v1/rerank", timeout=60, json={
            "model": "vl-rerank", "query": "q", "documents": ["a text", "data:image/png;base64,aGVsbG8="]})
        assert broken.status_code == 400 and broken.json()["error"]["param"] == "documents[1]", broken.text
        image_query_on_every_rerank_route(server, directory, page, photo)
    finally:
        assert server.stop() == 0, server.log()


def image_query_on_every_rerank_route(server, directory, page, photo) -> None:
    """An image as the query (a ``data:image`` URL) on ``/v1/rerank``, ``/v2/rerank`` and TEI's ``/rerank``,
    ranked as ``Engine.rerank`` ranks the image; a query image that does not decode is named ``query``, and so is
    one that, read with every document, passes the pixel limit (the server's: the page's and the photo's pixels)."""
    import httpx
    from test_qwen3_vl_serving import data_url

    documents = ["a dog in the snow", "a table of monthly rainfall"]  # the photo twice: within the limit
    with Engine(str(directory), task="rerank", device="cpu") as engine:
        expected = engine.rerank(photo.convert("RGB"), documents)
        pairs = engine.score([(photo.convert("RGB"), d) for d in documents])
    np.testing.assert_allclose([r["score"] for r in sorted(expected, key=lambda r: r["index"])], pairs, atol=1e-6)
    for route, field in (("/v1/rerank", "documents"), ("/v2/rerank", "documents"), ("/rerank", "texts")):
        model = {} if route == "/rerank" else {"model": "vl-rerank"}  # TEI's body has no model (the one served)
        answer = httpx.post(server.url + route, timeout=60, json={**model, "query": data_url(photo), field: documents})
        assert answer.status_code == 200, (route, answer.text)
        got = answer.json() if route == "/rerank" else answer.json()["results"]
        assert [r["index"] for r in got] == [r["index"] for r in expected], route
        np.testing.assert_allclose([r.get("relevance_score", r.get("score")) for r in got],
                                   [r["score"] for r in expected], atol=1e-4)
        broken = httpx.post(server.url + route, timeout=60, json={
            **model, "query": "data:image/png;base64,aGVsbG8=", field: ["a text"]})
        if route == "/rerank":  # TEI's shape: 422, {"error": message, "error_type"}
            assert broken.status_code == 422 and broken.json()["error"].startswith("query: "), broken.text
        else:
            assert broken.status_code == 400 and broken.json()["error"]["param"] == "query", (route, broken.text)
        assert "not an image file" in broken.text
        too_many = httpx.post(server.url + route, timeout=60, json={
            **model, "query": data_url(photo), field: [data_url(page), data_url(page)]})
        assert too_many.status_code == 413 and f"{field}[1]" in too_many.text, (route, too_many.text)
        thrice = httpx.post(server.url + route, timeout=60, json={**model, "query": data_url(photo), field: ["a"] * 3})
        assert thrice.status_code == 413 and "query: the query image is read with each of the 3" in thrice.text, \
            (route, thrice.text)
