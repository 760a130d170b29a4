"""Qwen2-VL as a single-vector embedder against transformers' ``Qwen2VLModel``: texts, images and text + image inputs
in one list, the last token's hidden state (normalized) within 1e-4 in fp32, multimodal rotary positions as
``get_rope_index`` makes them. The reference inputs are laid out as ``Qwen2VLProcessor`` does (its image processor,
one ``<|image_pad|>`` per merged 2x2 block, the tokenizer): the processor itself needs torchvision."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from wde_plugin_kit.cpu_info import CPU_BACKENDS
from wde_plugin_kit.image_builders import random_images
from wde_plugin_kit.vision_language import QWEN_VL_CHAT_TEMPLATE, chat_framed, save_random_qwen2_vl
from wde_core import Engine

VISION = "<|vision_start|><|image_pad|><|vision_end|>"


class Processor:
    """``Qwen2VLProcessor``'s layout of one input: the image processor's patches and grid, the text with its one
    ``<|image_pad|>`` repeated per merged 2x2 block of patches, tokenized, and ``mm_token_type_ids`` (1 at images)."""

    def __init__(self, directory) -> None:
        from transformers import AutoImageProcessor, AutoTokenizer

        self.images, self.tokenizer = AutoImageProcessor.from_pretrained(directory), AutoTokenizer.from_pretrained(directory)

    def __call__(self, text: str, image=None) -> dict:
        inputs = {}
        if image is not None:
            inputs = dict(self.images(images=[image], return_tensors="pt"))
            blocks = int(inputs["image_grid_thw"][0].prod()) // self.images.merge_size ** 2
            text = text.replace("<|image_pad|>", "<|image_pad|>" * blocks, 1)
        inputs["input_ids"] = self.tokenizer([text], return_tensors="pt")["input_ids"]
        inputs["mm_token_type_ids"] = (inputs["input_ids"] == self.tokenizer.convert_tokens_to_ids("<|image_pad|>"))
        inputs["mm_token_type_ids"] = inputs["mm_token_type_ids"].int()
        return inputs


@pytest.fixture(scope="module")
def qwen2_vl(tmp_path_factory):
    """The saved directory, transformers' base model and the reference layout."""
    from transformers import Qwen2VLModel

    directory = save_random_qwen2_vl(tmp_path_factory.mktemp("qwen2-vl") / "qwen2-vl-tiny")
    reference = Qwen2VLModel.from_pretrained(directory, dtype=torch.float32, attn_implementation="eager")
    return directory, reference.eval(), Processor(directory)


def reference_vector(reference, processor, item) -> np.ndarray:
    """transformers' last-token state of one input alone (text; image placeholder then text), L2-normalized."""
    if isinstance(item, str):
        inputs = processor(item)
    else:
        text, image = (item["text"], item["image"]) if isinstance(item, dict) else ("", item)
        inputs = processor(VISION + text, image)
    with torch.no_grad():
        state = reference(**inputs).last_hidden_state[0, -1]
    return (state / state.norm()).numpy()


def test_gme_chat_framing_matches_qwen2_vl_model(qwen2_vl, tmp_path):
    """GME's layout (the chat turn, then ``<|endoftext|>``, whose state is pooled) through the directory's chat
    template: ``framing="chat"``, the engine's ``instruction`` or a call's ``prompt`` as the system turn."""
    import shutil

    directory, reference, processor = qwen2_vl
    framed = shutil.copytree(directory, tmp_path / "gme-tiny")
    (framed / "chat_template.jinja").write_text(QWEN_VL_CHAT_TEMPLATE)
    picture = random_images(1, seed=3)[0]
    items, layouts = ["a photo of a cat", {"text": "find this", "image": picture}], [("a photo of a cat", None),
                                                                                     ("find this", picture)]
    with Engine(str(framed), device="cpu", framing="chat", instruction="You are a helpful assistant.",
                chat_suffix="<|endoftext|>") as engine:
        for instruction, prompt in (("You are a helpful assistant.", None), ("Find an image.", "Find an image.")):
            got = engine.encode(items, prompt=prompt)
            for vector, (text, image) in zip(got, layouts):
                inputs = processor(chat_framed(instruction, text, image is not None) + "<|endoftext|>", image)
                with torch.no_grad():
                    state = reference(**inputs).last_hidden_state[0, -1]
                assert np.abs(vector - (state / state.norm()).numpy()).max() <= 1e-4
    with Engine(str(framed), device="cpu") as engine:  # Qwen2-VL embedders are plain unless asked, template or not
        expected = reference_vector(reference, processor, "a photo of a cat")
        assert np.abs(engine.encode(["a photo of a cat"])[0] - expected).max() <= 1e-4


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_texts_images_and_pairs_match_qwen2_vl_model(qwen2_vl, backend):
    directory, reference, processor = qwen2_vl
    pictures = random_images(4, seed=7)
    items = ["a photo of a cat", pictures[0], {"text": "what is shown here?", "image": pictures[1]},
             "two dogs playing in the snow on a sunny afternoon", pictures[2],
             {"text": "describe the chart", "image": pictures[3]}]
    expected = np.stack([reference_vector(reference, processor, item) for item in items])
    with Engine(str(directory), device="cpu", attention_backend=backend) as engine:
        assert engine.pipeline.workflow.name == "qwen2-vl-embed"
        got = engine.encode(items)
    diff = np.abs(got - expected).max()
    print(f"{backend}: max abs diff {diff:.2e}")
    assert got.shape == expected.shape and diff <= 1e-4
    assert np.abs(expected[1] - expected[2]).max() > 1e-3  # the text after an image changes the vector


def test_bfloat16_stays_within_the_stated_tolerance(qwen2_vl):
    # measured here: min cosine 0.99998 against fp32 transformers
    directory, reference, processor = qwen2_vl
    pictures = random_images(3, seed=8)
    items = ["a photo of a cat", pictures[0], {"text": "what is shown here?", "image": pictures[1]}, pictures[2]]
    expected = np.stack([reference_vector(reference, processor, item) for item in items])
    with Engine(str(directory), device="cpu", dtype="bfloat16") as engine:
        got = engine.encode(items)
    cosines = (got * expected).sum(1)
    print(f"bf16 min cosine {cosines.min():.6f}")
    assert cosines.min() >= 0.999


def test_multimodal_positions_follow_get_rope_index(qwen2_vl):
    directory, reference, processor = qwen2_vl
    from wde_vision_language.public import mrope_positions

    inputs = processor(VISION + "after the picture", random_images(5, seed=1)[4])
    expected, _ = reference.get_rope_index(inputs["input_ids"], inputs["mm_token_type_ids"],
                                           image_grid_thw=inputs["image_grid_thw"])
    grid = tuple(int(x) for x in inputs["image_grid_thw"][0])
    got = mrope_positions(inputs["input_ids"][0].tolist(), grid, reference.config.image_token_id, 2)
    assert torch.equal(got, expected[:, 0]) and not torch.equal(got[1], got[2])  # the image's rows and columns differ


def test_bad_inputs_are_refused_naming_them(qwen2_vl):
    directory, _, _ = qwen2_vl
    with Engine(str(directory), device="cpu") as engine:
        with pytest.raises(TypeError, match="input 1: field 'text' must be a str"):
            engine.encode(["fine", {"text": 3, "image": random_images(1)[0]}])
        with pytest.raises(ValueError, match="input 0: the text contains the placeholder token"):
            engine.encode(["<|image_pad|>"])
        assert engine.encode(["still serving"]).shape == (1, 64)


def test_dimensions_are_checked_against_the_decoder_width(qwen2_vl):
    # a Qwen2-VL config has no top-level hidden_size: the pooled vector's width is the text config's (64 here), and a
    # larger dimensions was once passed through, giving 64-dim vectors
    directory, reference, processor = qwen2_vl
    picture = random_images(1, seed=3)[0]
    with Engine(str(directory), device="cpu") as engine:
        with pytest.raises(ValueError, match="dimensions=100 exceeds the model's embedding size 64"):
            engine.encode(["a text", picture], dimensions=100)
        assert engine.encode(["a text", picture], dimensions=64).shape == (2, 64)
        short = engine.encode(["a text", picture], dimensions=16)
    full = np.stack([reference_vector(reference, processor, item) for item in ("a text", picture)])[:, :16]
    assert np.abs(short - full / np.linalg.norm(full, axis=1, keepdims=True)).max() <= 1e-4
