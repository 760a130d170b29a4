"""wde-clip against transformers: CLIP, SigLIP and SigLIP 2 image and text features after the saved processor (odd image
sizes, every image mode, 3 text and 2 vision layers), the towers alone, bf16, mixed lists, and every bad input."""

from __future__ import annotations

import base64
import io
import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers

from wde_plugin_kit.corpus import cosines
from wde_plugin_kit.cpu_info import CPU_BACKENDS
from wde_plugin_kit.image_builders import random_images, save_random_clip
from wde_core import Engine
from wde_plugin_kit.serve import WDE

TEXTS = ["a photo of a cat", "two dogs playing in the snow, seen from far away on a bright winter day", "x",
         "A very long caption " * 20]
FAMILIES = {"clip": "CLIPModel", "siglip": "SiglipModel", "siglip2": "Siglip2Model"}


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def family_dir(request, tmp_path_factory) -> tuple[str, Path]:
    return request.param, save_random_clip(tmp_path_factory.mktemp(request.param), request.param)


def hf_features(directory: Path, family: str, images: list, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """transformers' ``get_image_features`` / ``get_text_features`` after the directory's saved processors
    (SigLIP texts padded to max_length as it was trained; CLIP's with their attention mask; SigLIP 2's images
    each on its own patch grid, with the pixel attention mask)."""
    model = getattr(transformers, FAMILIES[family]).from_pretrained(directory).eval()
    processor = transformers.AutoImageProcessor.from_pretrained(directory)
    tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
    with torch.inference_mode():
        image_features = _pooled(model.get_image_features(**image_inputs(processor, images, family)))
        if family != "clip":
            ids = tokenizer(texts, padding="max_length", max_length=tokenizer.model_max_length, truncation=True,
                            return_tensors="pt")["input_ids"]
            text_features = _pooled(model.get_text_features(input_ids=ids))
        else:
            encoded = tokenizer(texts, padding=True, truncation=True, return_tensors="pt")
            text_features = _pooled(model.get_text_features(input_ids=encoded["input_ids"],
                                                            attention_mask=encoded["attention_mask"]))
    return image_features.numpy(), text_features.numpy()


def image_inputs(processor, images: list, family: str) -> dict:
    """The processor's outputs the model takes: SigLIP 2's patches with their mask and grids, else pixels (images
    converted to RGB by transformers first where the processor does not do it: SigLIP 2's)."""
    if not processor.do_convert_rgb:
        from transformers.image_transforms import convert_to_rgb

        images = [convert_to_rgb(image, return_numpy=True) for image in images]
    processed = processor(images=images, return_tensors="pt")
    return dict(processed) if family == "siglip2" else {"pixel_values": processed["pixel_values"]}


def _pooled(output) -> torch.Tensor:
    return getattr(output, "pooler_output", output)


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_mixed_texts_and_images_match_transformers(family_dir, backend):
    family, directory = family_dir
    images = random_images(12)  # RGB, L, RGBA, P, LA; 37x41, 64x20 (wide), 19x90 (tall), 8x9 ...
    image_ref, text_ref = hf_features(directory, family, images, TEXTS)
    items = [images[0], TEXTS[0], *images[1:6], TEXTS[1], TEXTS[2], *images[6:], TEXTS[3]]
    reference = np.concatenate([image_ref[:1], text_ref[:1], image_ref[1:6], text_ref[1:3], image_ref[6:],
                                text_ref[3:]])
    with Engine(str(directory), attention_backend=backend) as engine:
        got = engine.encode(items)
        single = engine.encode(images[2])
    assert got.shape == reference.shape and got.dtype == np.float32
    assert np.abs(got - reference).max() <= 1e-4
    assert cosines(got, reference).min() >= 0.99999
    np.testing.assert_allclose(single, reference[3], atol=1e-5)


def test_bf16_against_fp32_transformers(family_dir):
    family, directory = family_dir
    images = random_images(6, seed=3)
    image_ref, text_ref = hf_features(directory, family, images, TEXTS)
    with Engine(str(directory), dtype="bfloat16") as engine:
        got = engine.encode([*images, *TEXTS])
    measured = cosines(got, np.concatenate([image_ref, text_ref])).min()
    assert measured >= 0.9995, measured


HALVES = [("clip", "vision", "CLIPVisionModelWithProjection", "image_embeds"),
          ("clip", "text", "CLIPTextModelWithProjection", "text_embeds"),
          ("siglip", "vision", "SiglipVisionModel", "pooler_output"),
          ("siglip", "text", "SiglipTextModel", "pooler_output"),
          ("siglip2", "vision", "Siglip2VisionModel", "pooler_output"),
          ("siglip2", "text", "Siglip2TextModel", "pooler_output")]


@pytest.mark.parametrize("family,half,cls,field", HALVES)
def test_a_tower_alone(tmp_path, family, half, cls, field):
    directory = save_random_clip(tmp_path / cls, family, half=half)
    model = getattr(transformers, cls).from_pretrained(directory).eval()
    with torch.inference_mode():
        if half == "vision":
            items = random_images(5, seed=1)
            processor = transformers.AutoImageProcessor.from_pretrained(directory)
            reference = getattr(model(**image_inputs(processor, items, family)), field).numpy()
        else:
            items = TEXTS
            kwargs = dict(padding="max_length", max_length=16) if family != "clip" else dict(padding=True)
            encoded = transformers.AutoTokenizer.from_pretrained(directory)(TEXTS, truncation=True,
                                                                           return_tensors="pt", **kwargs)
            if family != "clip":
                encoded.pop("attention_mask")
            reference = getattr(model(**encoded), field).numpy()
    with Engine(str(directory)) as engine:
        assert np.abs(engine.encode(items) - reference).max() <= 1e-4
        other = TEXTS[0] if half == "vision" else random_images(1)[0]
        with pytest.raises(ValueError, match=r"input 0: an? (text|image), but this model has only a"):
            engine.encode([other])


@pytest.fixture(scope="module")
def clip_engine(tmp_path_factory):
    directory = save_random_clip(tmp_path_factory.mktemp("clip-engine"), "clip")
    with Engine(str(directory)) as engine:
        yield engine


def png_bytes(picture) -> bytes:
    buffer = io.BytesIO()
    picture.save(buffer, format="PNG")
    return buffer.getvalue()


def test_every_form_of_an_image_input_gives_the_same_vector(clip_engine, tmp_path):
    picture = random_images(1)[0]
    data = png_bytes(picture)
    (tmp_path / "picture.png").write_bytes(data)
    url = "data:image/png;base64," + base64.b64encode(data).decode()
    forms = [picture, tmp_path / "picture.png", data, bytearray(data), {"image": url}, {"image": data},
             {"image": tmp_path / "picture.png"}, {"image": picture}]
    got = clip_engine.encode(forms)
    np.testing.assert_allclose(got, np.repeat(got[:1], len(forms), axis=0), atol=1e-6)


def huge_png_header(width: int, height: int) -> bytes:
    """A PNG whose header claims ``width x height`` pixels (the data is a 1x1 image's): refused unread."""
    import struct
    import zlib

    data = png_bytes(random_images(1)[0].resize((1, 1)))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    chunk = b"IHDR" + header
    return data[:8] + struct.pack(">I", 13) + chunk + struct.pack(">I", zlib.crc32(chunk)) + data[33:]


BAD_IMAGES = [
    (b"definitely not an image", "is not an image file PIL can read"),
    ("truncated", "could not be decoded"),
    ("bomb", r"over the limit of 50,000,000 pixels \(Image size \(400000000 pixels\)"),  # PIL's own check
    ("large", r"9000 x 9000 = 81,000,000 pixels, over the limit of 50,000,000 pixels"),  # wde's, under PIL's
    ("mode", r"has mode 'I;16'"),
    ({"image": "https://example.invalid/cat.png"}, "is a remote URL; wde does not fetch URLs"),
    ({"image": "data:image/png;base64,@@@"}, "base64 payload does not decode"),
    ({"image": "cat.png"}, r"must be a PIL image, a pathlib.Path, bytes or a data:image/...;base64, URL"),
    (Path("/nonexistent/cat.png"), "cannot read '/nonexistent/cat.png'"),
]


@pytest.mark.parametrize("bad,message", BAD_IMAGES, ids=[str(i) for i in range(len(BAD_IMAGES))])
def test_bad_images_are_refused_naming_the_input_and_the_engine_goes_on(clip_engine, bad, message):
    from PIL import Image

    good = random_images(2)
    if bad == "truncated":
        bad = png_bytes(good[0].resize((300, 300)))[:-400]
    elif bad in ("bomb", "large"):
        bad = huge_png_header(*((20000, 20000) if bad == "bomb" else (9000, 9000)))
    elif bad == "mode":
        bad = Image.new("I;16", (12, 12))
    with pytest.raises(ValueError, match=rf"^input 2: field 'image' .*{message}|^input 2: field 'image': {message}"):
        clip_engine.encode([good[0], "a text", bad, good[1]])
    assert clip_engine.encode([good[0], "a text"]).shape == (2, 24)


def test_other_inputs_are_refused_by_name(clip_engine):
    with pytest.raises(TypeError, match=r"input 1: expected a str \(text\) or an image"):
        clip_engine.encode(["a text", 42])
    with pytest.raises(ValueError, match="embed_tokens\\(\\): an image-text model gives one vector"):
        clip_engine.embed_tokens(["a text"])
    with pytest.raises(ValueError, match="dimensions=30 exceeds the model's embedding size 24"):
        clip_engine.encode(["a text"], dimensions=30)


def test_a_text_model_refuses_an_image_by_name(tiny_bert_dir):
    with Engine(str(tiny_bert_dir)) as engine:
        with pytest.raises(TypeError, match="input 1: field 'text' must be a str, got an image, and this model "
                                            "reads text only"):
            engine.encode(["hello", random_images(1)[0]])


def test_similarity_of_texts_and_images(clip_engine):
    images, texts = random_images(3), TEXTS[:2]
    vectors = clip_engine.encode([*texts, *images], normalize=True)
    scores = clip_engine.similarity(texts, images)
    np.testing.assert_allclose(scores, vectors[:2] @ vectors[2:].T, atol=1e-6)
    assert scores.shape == (2, 3) and clip_engine.similarity(texts[0], images).shape == (3,)
    with pytest.raises(ValueError, match="^b: input 1: field 'image'"):
        clip_engine.similarity(texts, [images[0], b"nope"])


def test_patches_count_against_the_token_budget(tmp_path):
    directory = save_random_clip(tmp_path / "clip", "clip")
    batches = []
    with Engine(str(directory), max_num_batched_tokens=100) as engine:  # 7 x 7 patches + class token = 50
        engine.batch_listeners.append(lambda batch: batches.append([r.num_tokens for r in batch]))
        engine.encode(random_images(5))
    assert batches == [[50, 50], [50, 50], [50]]


def test_inspect_shows_the_image_size_patches_and_preprocessing(tmp_path):
    directory = save_random_clip(tmp_path / "clip", "clip")
    out = subprocess.run([*WDE, "inspect", str(directory), "--json"],
                         capture_output=True, text=True, check=True).stdout
    reasons = json.loads(out)["reasons"]
    assert reasons["images"].startswith("30 x 30 px, 7 x 7 patches of 4 px + a class token = 50 tokens per image")
    assert "center crop to {'height': 30, 'width': 30}" in reasons["images"]
    assert reasons["causal"].startswith("causal attention")


def test_siglip2_images_keep_their_own_patch_grids(tmp_path):
    directory = save_random_clip(tmp_path / "siglip2", "siglip2")
    sizes = []
    with Engine(str(directory)) as engine:
        engine.batch_listeners.append(lambda batch: sizes.extend(r.num_tokens for r in batch))
        engine.encode(random_images(6))  # 37x41, 64x20, 19x90, 30x30, 123x77, 8x9: at most 24 patches each
    assert len(set(sizes)) > 2 and max(sizes) <= 24, sizes
