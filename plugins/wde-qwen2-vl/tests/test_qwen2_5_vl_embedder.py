"""Qwen2.5-VL as a single-vector embedder against transformers' ``Qwen2_5_VLModel``: texts, images and text + image
inputs in one list, the last token's hidden state (normalized) within 1e-4 in fp32 (the windowed vision tower, images
of odd sizes with partial windows), multimodal rotary positions as Qwen2.5-VL's ``get_rope_index`` makes them for
images (videos: test_qwen2_vl_video.py). Inputs are laid out as ``Qwen2_5_VLProcessor`` does (the test's
``Processor``: the processor itself needs torchvision)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from wde_plugin_kit.cpu_info import CPU_BACKENDS
from wde_plugin_kit.image_builders import random_images
from wde_plugin_kit.vision_language import save_random_qwen2_5_vl
from test_qwen2_vl_embedder import VISION, Processor, reference_vector
from wde_core import Engine


@pytest.fixture(scope="module")
def qwen2_5_vl(tmp_path_factory):
    """The saved directory, transformers' base model, the reference layout and a mixed list with its vectors."""
    from transformers import Qwen2_5_VLModel

    directory = save_random_qwen2_5_vl(tmp_path_factory.mktemp("qwen2.5-vl") / "qwen2.5-vl-tiny")
    reference = Qwen2_5_VLModel.from_pretrained(directory, dtype=torch.float32, attn_implementation="eager").eval()
    processor = Processor(directory)
    pictures = random_images(5, seed=7)
    items = ["a photo of a cat", pictures[0], {"text": "what is shown here?", "image": pictures[1]},
             "two dogs playing in the snow on a sunny afternoon", pictures[2],
             {"text": "describe the chart", "image": pictures[3]}, pictures[4]]
    expected = np.stack([reference_vector(reference, processor, item) for item in items])
    return directory, reference, processor, items, expected


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_texts_images_and_pairs_match_qwen2_5_vl_model(qwen2_5_vl, backend):
    directory, _, _, items, expected = qwen2_5_vl
    with Engine(str(directory), device="cpu", attention_backend=backend) as engine:
        assert engine.pipeline.workflow.name == "qwen2-vl-embed"
        assert type(engine.executor.worker.model.visual).__name__ == "WindowVisionTower"
        got = engine.encode(items)
    diff = np.abs(got - expected).max()
    print(f"{backend}: max abs diff {diff:.2e}")
    assert got.shape == expected.shape and diff <= 1e-4
    assert np.abs(expected[1] - expected[2]).max() > 1e-3  # the text after an image changes the vector


def test_bfloat16_stays_within_the_stated_tolerance(qwen2_5_vl):
    # measured here: min cosine 0.99997 against fp32 transformers
    directory, _, _, items, expected = qwen2_5_vl
    with Engine(str(directory), device="cpu", dtype="bfloat16") as engine:
        got = engine.encode(items)
    cosines = (got * expected).sum(1)
    print(f"bf16 min cosine {cosines.min():.6f}")
    assert cosines.min() >= 0.999


def test_image_positions_follow_qwen2_5_get_rope_index(qwen2_5_vl):
    directory, reference, processor, _, _ = qwen2_5_vl
    from wde_vision_language.public import mrope_positions

    assert reference.config.vision_config.tokens_per_second != 1  # would scale a video's temporal positions
    for picture in random_images(6, seed=1)[3:]:
        inputs = processor("before " + VISION + "after the picture", picture)
        expected, _ = reference.get_rope_index(inputs["input_ids"], inputs["mm_token_type_ids"],
                                               image_grid_thw=inputs["image_grid_thw"])
        grid = tuple(int(x) for x in inputs["image_grid_thw"][0])
        got = mrope_positions(inputs["input_ids"][0].tolist(), grid, reference.config.image_token_id, 2)
        assert torch.equal(got, expected[:, 0]) and not torch.equal(got[1], got[2])
