"""Qwen3-VL as a single-vector embedder against transformers' ``Qwen3VLModel``: texts, images and text + image inputs
in one list (images of odd sizes and modes, several a batch), the last token's hidden state (normalized) within 1e-4
in fp32; the pieces Qwen3-VL adds to Qwen2.5-VL each checked against transformers' own code (the learned positions'
interpolation taps, interleaved M-RoPE, image positions); refusals. The reference inputs are laid out as
``Qwen3VLProcessor`` lays out an image (its image processor, one ``<|image_pad|>`` per merged 2x2 block, the
tokenizer, ``mm_token_type_ids``): the processor itself cannot be built without torchvision (its video processor)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from qwen3_vl_builders import save_random_qwen3_vl
from wde_plugin_kit.cpu_info import CPU_BACKENDS
from wde_plugin_kit.image_builders import random_images
from wde_core import Engine

VISION = "<|vision_start|><|image_pad|><|vision_end|>"


class Processor:
    """``Qwen3VLProcessor``'s layout of one input: the image processor's patches and grid, the text with its one
    ``<|image_pad|>`` repeated per merged 2x2 block of patches, tokenized, and ``mm_token_type_ids`` (1 at images)."""

    def __init__(self, directory) -> None:
        from transformers import AutoImageProcessor, AutoTokenizer

        self.images, self.tokenizer = AutoImageProcessor.from_pretrained(directory), AutoTokenizer.from_pretrained(directory)
        self.image_token_id = self.tokenizer.convert_tokens_to_ids("<|image_pad|>")

    def __call__(self, text: str, image=None) -> dict:
        inputs = {}
        if image is not None:
            inputs = dict(self.images(images=[image], return_tensors="pt"))
            blocks = int(inputs["image_grid_thw"][0].prod()) // self.images.merge_size ** 2
            text = text.replace("<|image_pad|>", "<|image_pad|>" * blocks, 1)
        inputs["input_ids"] = self.tokenizer([text], return_tensors="pt")["input_ids"]
        inputs["mm_token_type_ids"] = (inputs["input_ids"] == self.image_token_id).int()
        return inputs


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


@pytest.fixture(scope="module")
def qwen3_vl(tmp_path_factory):
    """The saved directory, transformers' base model, the reference layout and a mixed list with its vectors."""
    from transformers import Qwen3VLModel

    directory = save_random_qwen3_vl(tmp_path_factory.mktemp("qwen3-vl") / "qwen3-vl-tiny")
    reference = Qwen3VLModel.from_pretrained(directory, dtype=torch.float32, attn_implementation="eager").eval()
    processor = Processor(directory)
    pictures = random_images(6, seed=7)
    items = ["a photo of a cat", pictures[0], {"text": "what is shown here?", "image": pictures[1]},
             "two dogs playing in the snow on a sunny afternoon", pictures[4],
             {"text": "describe the chart", "image": pictures[2]}, pictures[5], pictures[3]]
    expected = np.stack([reference_vector(reference, processor, item) for item in items])
    return directory, reference, processor, items, expected


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_texts_images_and_pairs_match_qwen3_vl_model(qwen3_vl, backend):
    directory, _, _, items, expected = qwen3_vl
    with Engine(str(directory), device="cpu", attention_backend=backend) as engine:
        assert engine.pipeline.workflow.name == "qwen3-vl-embed"
        assert type(engine.executor.worker.model.visual).__name__ == "Qwen3VisionTower"
        got = engine.encode(items)
    diff = np.abs(got - expected).max(axis=1)
    print(f"{backend}: max abs diff per vector {diff.max():.2e}")
    assert got.shape == expected.shape and diff.max() <= 1e-4
    assert np.abs(expected[1] - expected[2]).max() > 1e-3  # the text after an image changes the vector


def test_bfloat16_stays_within_the_stated_tolerance(qwen3_vl):
    # measured here: min cosine 0.99996 against fp32 transformers
    directory, _, _, items, expected = qwen3_vl
    with Engine(str(directory), device="cpu", dtype="bfloat16") as engine:
        got = engine.encode(items)
    cosines = (got * expected).sum(1)
    print(f"bf16 min cosine {cosines.min():.6f}")
    assert cosines.min() >= 0.999


@pytest.mark.parametrize("side", [4, 48])  # the tests' 4 x 4 grid, Qwen3-VL's 48 x 48 (2,304 positions)
def test_position_taps_equal_transformers_interpolation(side):
    from transformers.vision_utils import get_vision_interpolation_indices_and_weights

    from wde_qwen3_vl.public import position_taps

    grids = [(1, 6, 4), (1, 10, 2), (2, 4, 8), (1, 2, 2), (1, 62, 94)]
    expected_taps, expected_weights = get_vision_interpolation_indices_and_weights(
        torch.tensor(grids), side, mode="bilinear", align_corners=True, spatial_merge_size=2)
    taps, weights = position_taps(grids, 2, side)
    assert torch.equal(taps, expected_taps) and torch.allclose(weights, expected_weights, atol=1e-6)


def test_interleaved_rotary_equals_qwen3_vl_text_rotary():
    from transformers import Qwen3VLTextConfig
    from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLTextRotaryEmbedding

    from wde_core.plugin_api import RotaryTables
    from wde_qwen3_vl.public import interleaved_mrope_rotary

    config = Qwen3VLTextConfig(head_dim=128, rope_parameters={  # Qwen3-VL-2B's
        "rope_type": "default", "mrope_section": [24, 20, 20], "mrope_interleaved": True, "rope_theta": 5000000.0})
    positions = torch.stack([torch.arange(40), torch.arange(40) % 7 + 3, torch.arange(40) % 5 + 9])
    expected = Qwen3VLTextRotaryEmbedding(config)(torch.zeros(1, dtype=torch.float32), positions[:, None])
    tables = RotaryTables(config, 64)
    tables.compute()
    cos, sin = interleaved_mrope_rotary(tables, positions, [24, 20, 20])
    assert torch.allclose(cos, expected[0][0], atol=1e-6) and torch.allclose(sin, expected[1][0], atol=1e-6)


def test_image_positions_follow_qwen3_vl_get_rope_index(qwen3_vl):
    _, reference, processor, _, _ = qwen3_vl
    from wde_vision_language.public import mrope_positions

    for picture in random_images(6, seed=1)[3:]:
        inputs = processor("before " + VISION + "after the picture", picture)
        expected, _ = reference.get_rope_index(inputs["input_ids"], inputs["mm_token_type_ids"],
                                               image_grid_thw=inputs["image_grid_thw"])
        grid = tuple(int(x) for x in inputs["image_grid_thw"][0])
        got = mrope_positions(inputs["input_ids"][0].tolist(), grid, reference.config.image_token_id, 2)
        assert torch.equal(got, expected[:, 0]) and not torch.equal(got[1], got[2])


def test_what_is_not_supported_is_refused_naming_it(qwen3_vl):
    directory, _, _, items, expected = qwen3_vl
    with Engine(str(directory), device="cpu") as engine:
        with pytest.raises(TypeError, match="input 1: field 'video': expected a list of frames"):  # videos: frames
            engine.encode(["fine", {"text": "a clip", "video": b"an mp4 file"}])
        with pytest.raises(ValueError, match="dimensions=100 exceeds the model's embedding size 64"):
            engine.encode(items[:2], dimensions=100)
        with pytest.raises(ValueError, match="input 0: the text contains the placeholder token '<\\|image_pad\\|>'"):
            engine.encode(["<|image_pad|>"])
        with pytest.raises(ValueError, match="embed_tokens\\(\\): this vision-language embedder gives one vector"):
            engine.embed_tokens("a text")
        short = engine.encode(items[:2], dimensions=32)
    assert short.shape == (2, 32)  # Matryoshka-style: the first 32 of the pooled vector, normalized
    cut = expected[:2, :32] / np.linalg.norm(expected[:2, :32], axis=1, keepdims=True)
    assert np.abs(short - cut).max() <= 1e-4


@pytest.mark.slow
def test_real_qwen3_vl_2b_widths_match_at_page_resolution(tmp_path):
    # no Qwen3-VL checkpoint can be installed from a package index here, so the real model's shapes are checked with
    # random weights: Qwen3-VL-2B's (Qwen3-VL-Embedding-2B's backbone) widths (vision 1024 wide, 16 heads of 64, MLP
    # 4096, a 48 x 48 learned position grid; decoder 2048 wide, 16 heads of 128, 8 key/value heads, MLP 6144,
    # interleaved sections [24, 20, 20]), one layer each with a deepstack merger, a page at ~576 merged patches
    from PIL import Image
    from transformers import Qwen3VLModel

    text = dict(hidden_size=2048, num_attention_heads=16, num_key_value_heads=8, head_dim=128, intermediate_size=6144,
                num_hidden_layers=1, max_position_embeddings=262144, rope_parameters={
                    "rope_type": "default", "mrope_section": [24, 20, 20], "mrope_interleaved": True,
                    "rope_theta": 5000000.0})
    vision = dict(depth=1, hidden_size=1024, intermediate_size=4096, num_heads=16, out_hidden_size=2048,
                  num_position_embeddings=2304, deepstack_visual_indexes=[0])
    directory = save_random_qwen3_vl(tmp_path / "qwen3-vl-2b-shape", text=text, vision=vision,
                                     max_pixels=576 * 32 * 32)
    reference = Qwen3VLModel.from_pretrained(directory, dtype=torch.float32, attn_implementation="sdpa").eval()
    page = Image.fromarray(np.random.default_rng(0).integers(0, 256, (1100, 850, 3), dtype=np.uint8))
    items = [{"text": "what does the page say?", "image": page}, "a question about rainfall"]
    processor = Processor(directory)
    assert int(processor.images(images=[page], return_tensors="pt")["image_grid_thw"][0].prod()) // 4 > 500
    expected = np.stack([reference_vector(reference, processor, item) for item in items])
    with Engine(str(directory), device="cpu") as engine:
        got = engine.encode(items)
    worst = np.abs(got - expected).max()
    print(f"real widths: max abs diff {worst:.2e}")
    assert got.shape == (2, 2048) and worst <= 1e-4
