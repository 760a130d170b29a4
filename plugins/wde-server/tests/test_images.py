"""Image inputs over ``wde serve`` (issue 25): a real server process on loopback serving a tiny random CLIP and
MiniLM, driven by the official ``cohere`` and ``openai`` clients and httpx. Vectors equal the in-process
``Engine``'s for the same items; a bad image fails its own request only, with a 400 naming the field."""

from __future__ import annotations

import asyncio
import base64
import io
import struct
import zlib

import httpx
import numpy as np
import pytest

from wde_plugin_kit.corpus import minilm_path
from wde_plugin_kit.image_builders import random_images, save_random_clip
from wde_plugin_kit.serve import ServeProcess
from wde_core import Engine

pytest.importorskip("wde_clip")
TOL = 1e-5
PAYLOAD_LIMIT, IMAGE_PAYLOAD_LIMIT, MAX_PIXELS = 100_000, 1_000_000, 50_000
TEXTS = ["a photo of a cat", "a diagram of an engine", "two dogs on a beach"]


def png(picture) -> bytes:
    buffer = io.BytesIO()
    picture.save(buffer, format="PNG")
    return buffer.getvalue()


def data_url(data: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(data).decode()


def huge_png_header(width: int, height: int) -> bytes:
    """A small PNG whose header claims ``width x height`` pixels: over the pixel limit, refused unread."""
    data = png(random_images(1)[0].resize((1, 1)))
    chunk = b"IHDR" + struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return data[:8] + struct.pack(">I", 13) + chunk + struct.pack(">I", zlib.crc32(chunk)) + data[33:]


IMAGES = [png(picture) for picture in random_images(6)]
URLS = [data_url(data) for data in IMAGES]


@pytest.fixture(scope="module")
def clip_dir(tmp_path_factory):
    return save_random_clip(tmp_path_factory.mktemp("served-clip") / "clip", "clip")


@pytest.fixture(scope="module")
def server(clip_dir, tmp_path_factory):
    base = tmp_path_factory.mktemp("images-server")
    process = ServeProcess(str(clip_dir), str(minilm_path()), "--served-model-name", "clip", "--served-model-name",
                           "minilm", "--payload-limit", str(PAYLOAD_LIMIT), "--image-payload-limit",
                           str(IMAGE_PAYLOAD_LIMIT), "--max-request-pixels", str(MAX_PIXELS), "--max-client-batch-size",
                           "16", log=base / "serve.log")
    yield process
    assert process.stop() == 0, process.log()


@pytest.fixture(scope="module")
def engine(clip_dir):
    with Engine(str(clip_dir), device="cpu") as built:
        yield built


def post(server, path, body):
    return httpx.post(server.url + path, json=body, timeout=60)


def vectors(response) -> np.ndarray:
    assert response.status_code == 200, response.text
    body = response.json()
    if "data" in body:
        return np.array([d["embedding"] for d in body["data"]], dtype=np.float32)
    return np.array(body["embeddings"]["float"], dtype=np.float32)


def test_cohere_images_and_mixed_inputs_match_the_engine(server, engine):
    cohere = pytest.importorskip("cohere")
    client = cohere.ClientV2(api_key="unused", base_url=server.url)
    response = client.embed(model="clip", input_type="image", images=URLS[:4], embedding_types=["float", "base64"])
    expected = engine.encode([{"image": url} for url in URLS[:4]])
    np.testing.assert_allclose(np.array(response.embeddings.float_), expected, atol=TOL)
    decoded = [np.frombuffer(base64.b64decode(b), dtype="<f4") for b in response.embeddings.base64]
    np.testing.assert_allclose(np.array(decoded), expected, atol=TOL)
    assert response.meta.billed_units.images == 4
    parts = [cohere.TextEmbedContent(text=TEXTS[0]),
             cohere.ImageUrlEmbedContent(image_url=cohere.EmbedImageUrl(url=URLS[4])),
             cohere.TextEmbedContent(text=TEXTS[1]),
             cohere.ImageUrlEmbedContent(image_url=cohere.EmbedImageUrl(url=URLS[5]))]
    mixed = client.embed(model="clip", input_type="search_document", embedding_types=["float"],
                         inputs=[cohere.EmbedInput(content=[part]) for part in parts])
    expected = engine.encode([TEXTS[0], {"image": URLS[4]}, TEXTS[1], {"image": URLS[5]}])
    np.testing.assert_allclose(np.array(mixed.embeddings.float_), expected, atol=TOL)
    assert mixed.texts == TEXTS[:2]
    texts = client.embed(model="clip", input_type="search_query", texts=TEXTS, embedding_types=["float"])
    np.testing.assert_allclose(np.array(texts.embeddings.float_), engine.encode(TEXTS), atol=TOL)


def test_jina_image_and_text_items_match_the_engine(server, engine):
    body = {"model": "clip", "input": [TEXTS[0], {"image": URLS[0]}, {"text": TEXTS[1]},
                                       {"image": base64.b64encode(IMAGES[1]).decode()}]}
    expected = engine.encode([TEXTS[0], {"image": URLS[0]}, TEXTS[1], {"image": IMAGES[1]}])
    np.testing.assert_allclose(vectors(post(server, "/v1/embeddings", body)), expected, atol=TOL)
    openai = pytest.importorskip("openai")  # the OpenAI client's plain strings, unchanged
    client = openai.OpenAI(api_key="unused", base_url=server.url + "/v1")
    got = client.embeddings.create(model="clip", input=TEXTS)
    np.testing.assert_allclose(np.array([d.embedding for d in got.data]), engine.encode(TEXTS), atol=TOL)


def test_an_image_text_model_cuts_long_texts_in_its_tokenizer(server, engine):
    long = " ".join(["word"] * 100)
    got = vectors(post(server, "/v2/embed", {"model": "clip", "texts": [long, TEXTS[0]], "truncate": "END"}))
    np.testing.assert_allclose(got, engine.encode([long, TEXTS[0]], truncate=True), atol=TOL)
    refused = post(server, "/v1/embeddings", {"model": "clip", "input": [{"image": URLS[0]}, long]})
    assert refused.status_code == 422 and refused.json()["error"]["param"] == "input[1]", refused.text


TRUNCATED = data_url(IMAGES[4][:len(IMAGES[4]) // 2])
NOT_AN_IMAGE = data_url(b"definitely not an image")
REMOTE = "https://example.invalid/cat.png"
OVER_LIMIT = data_url(huge_png_header(20_000, 20_000))
BAD = [  # (route, body, status, field named, text in the message)
    ("/v2/embed", {"images": [URLS[0], TRUNCATED]}, 400, "images[1]", "could not be decoded"),
    ("/v2/embed", {"images": [NOT_AN_IMAGE]}, 400, "images[0]", "not an image file"),
    ("/v2/embed", {"images": [REMOTE]}, 400, "images[0]", "wde does not fetch URLs"),
    ("/v2/embed", {"images": [OVER_LIMIT]}, 400, "images[0]", "over the limit of 50,000,000"),
    ("/v2/embed", {"images": ["iVBORw0KGgo="]}, 400, "images[0]", "expected a data:image/...;base64, URL"),
    ("/v2/embed", {"images": ["data:image/png;base64,@@@"]}, 400, "images[0]", "base64 payload does not decode"),
    ("/v2/embed", {"inputs": [{"content": [{"type": "text", "text": "a"}]},
                              {"content": [{"type": "image_url", "image_url": {"url": REMOTE}}]}]},
     400, "inputs[1].content[0].image_url.url", "wde does not fetch URLs"),
    ("/v2/embed", {"inputs": [{"content": [{"type": "text", "text": "a"},
                                           {"type": "image_url", "image_url": {"url": URLS[0]}}]}]},
     400, "inputs[0].content", "not both; send them as separate inputs"),
    ("/v2/embed", {"inputs": [{"content": [{"type": "image_url", "text": "a"}]}]}, 400,
     "inputs[0].content[0]", "takes the field 'image_url'"),
    ("/v2/embed", {"texts": ["a"], "images": [URLS[0]]}, 400, "images", "exactly one of texts, images or inputs"),
    ("/v2/embed", {"images": [URLS[0]], "model": "minilm"}, 400, "images[0]", "reads text only"),
    ("/v2/embed", {"texts": [" ".join(["word"] * 100)], "truncate": "NONE"}, 422, "texts[0]", "max_model_len"),
    ("/v2/embed", {"texts": ["a"], "truncate": "START"}, 400, "truncate", "cuts a long text at its end only"),
    ("/v1/embeddings", {"input": ["a", {"image": TRUNCATED}]}, 400, "input[1].image", "could not be decoded"),
    ("/v1/embeddings", {"input": [{"image": NOT_AN_IMAGE}]}, 400, "input[0].image", "not an image file"),
    ("/v1/embeddings", {"input": [{"image": REMOTE}]}, 400, "input[0].image", "wde does not fetch URLs"),
    ("/v1/embeddings", {"input": [{"image": OVER_LIMIT}]}, 400, "input[0].image", "over the limit"),
    ("/v1/embeddings", {"input": [{"image": "@@@ not base64"}]}, 400, "input[0].image", "nor valid base64"),
    ("/v1/embeddings", {"input": [{"text": "a", "image": URLS[0]}]}, 400, "input[0]", "one of 'text' or 'image'"),
    ("/v1/embeddings", {"input": [{"image": 5}]}, 400, "input[0].image", "valid string"),
    ("/v1/embeddings", {"input": [{"image": URLS[0]}], "model": "minilm"}, 400, "input[0].image", "reads text only"),
]


@pytest.mark.parametrize("path, body, status, field, text", BAD, ids=[f"{b[0]}-{i}" for i, b in enumerate(BAD)])
def test_a_bad_image_fails_its_request_naming_the_field_and_the_server_goes_on(server, engine, path, body, status,
                                                                                field, text):
    response = post(server, path, {"model": "clip", **body})
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["message"].startswith(f"{field}: ") and text in error["message"], error
    assert error["param"] == field, error
    good = post(server, path, {"model": "clip", **({"images": URLS[:1]} if path == "/v2/embed"
                                                   else {"input": [{"image": URLS[0]}]})})
    np.testing.assert_allclose(vectors(good), engine.encode([{"image": URLS[0]}]), atol=TOL)


def test_bad_and_good_requests_at_once_each_get_their_own_answer(server, engine):
    expected = engine.encode([{"image": url} for url in URLS])

    async def one(client, i):
        body = {"model": "clip", "input": [{"image": URLS[i] if i % 2 else TRUNCATED}]}
        return i, await client.post(server.url + "/v1/embeddings", json=body, timeout=60)

    async def burst():
        async with httpx.AsyncClient() as client:
            return await asyncio.gather(*(one(client, i) for i in range(6)))

    for i, response in asyncio.run(burst()):
        if i % 2:
            np.testing.assert_allclose(vectors(response)[0], expected[i], atol=TOL)
        else:
            assert response.status_code == 400 and "input[0].image" in response.text, response.text


def test_images_have_their_own_payload_limit_and_texts_keep_theirs(server, engine):
    noise = np.random.default_rng(0).integers(0, 256, (120, 120, 3), dtype=np.uint8)
    from PIL import Image

    big = data_url(png(Image.fromarray(noise, "RGB")))
    assert PAYLOAD_LIMIT < 2 * len(big) < IMAGE_PAYLOAD_LIMIT
    response = post(server, "/v2/embed", {"model": "clip", "images": [big, big]})
    np.testing.assert_allclose(vectors(response), engine.encode([{"image": big}] * 2), atol=TOL)
    for path, body in (("/v1/embeddings", {"input": ["x" * (PAYLOAD_LIMIT + 10)]}),
                       ("/v2/embed", {"texts": ["x" * (PAYLOAD_LIMIT + 10)]}),
                       ("/embed", {"inputs": "x" * (PAYLOAD_LIMIT + 10)})):
        response = post(server, path, {"model": "clip", **body} if path != "/embed" else body)
        assert response.status_code == 413 and "--payload-limit" in response.text, (path, response.text)
    response = post(server, "/v1/embeddings", {"model": "clip", "input": [{"image": "A" * IMAGE_PAYLOAD_LIMIT}]})
    assert response.status_code == 413 and "--image-payload-limit" in response.text, response.text
    response = post(server, "/v2/embed", {"model": "clip", "images": [big] * 4})  # 4 x 14,400 pixels
    assert response.status_code == 413, response.text
    assert response.json()["error"]["message"].startswith("images[3]: the request's images reach 57,600 pixels")
    assert post(server, "/v1/embeddings", {"model": "minilm", "input": TEXTS}).status_code == 200
