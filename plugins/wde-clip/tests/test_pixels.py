"""wde-clip's own CLIP/SigLIP preprocessing against transformers' PIL-backend image processors: equal bit for bit
on odd sizes and every mode (after wde's RGB conversion), for each setting it covers; the processor itself for
every setting it does not."""

from __future__ import annotations

import pytest
import torch
from transformers.models.clip.image_processing_pil_clip import CLIPImageProcessorPil
from transformers.models.siglip.image_processing_pil_siglip import SiglipImageProcessorPil

from wde_plugin_kit.image_builders import random_images, save_random_clip
from wde_images.public import exact_preprocessor, load_image
from wde_core import Engine
from wde_core.plugin_api import as_image_input

COVERED = {
    "clip default": lambda: CLIPImageProcessorPil(size={"shortest_edge": 30}, crop_size={"height": 30, "width": 30}),
    "clip odd crop": lambda: CLIPImageProcessorPil(size={"shortest_edge": 33}, crop_size={"height": 21, "width": 27}),
    "clip crop over the image (zero padding)": lambda: CLIPImageProcessorPil(
        size={"shortest_edge": 16}, crop_size={"height": 24, "width": 20}),
    "clip bilinear, other scale and mean": lambda: CLIPImageProcessorPil(
        size={"shortest_edge": 25}, crop_size={"height": 25, "width": 25}, resample=2, rescale_factor=1 / 127.5,
        image_mean=[0.5, 0.5, 0.5], image_std=[0.5, 0.5, 0.5]),
    "siglip fixed size": lambda: SiglipImageProcessorPil(size={"height": 28, "width": 28}),
    "siglip wide size, nearest": lambda: SiglipImageProcessorPil(size={"height": 17, "width": 45}, resample=0),
}


def rgb_images() -> list:
    """The test images as wde hands them to preprocessing: decoded and converted to RGB."""
    return [load_image(as_image_input(image), f"input {i}") for i, image in enumerate(random_images(12))]


@pytest.mark.parametrize("name", sorted(COVERED))
def test_equals_the_processor_bit_for_bit(name):
    processor = COVERED[name]()
    preprocess = exact_preprocessor(processor)
    assert preprocess is not None, f"{name} should be covered"
    images = rgb_images()
    expected = processor(images=images, return_tensors="pt")["pixel_values"]
    got = preprocess(images)
    assert got.dtype == expected.dtype == torch.float32 and got.shape == expected.shape
    assert torch.equal(got, expected), f"max abs {(got - expected).abs().max().item()}"


@pytest.mark.parametrize("processor", [
    CLIPImageProcessorPil(do_rescale=False),
    CLIPImageProcessorPil(do_normalize=False),
    CLIPImageProcessorPil(do_resize=False),
    SiglipImageProcessorPil(size={"shortest_edge": 30, "longest_edge": 60}),
    SiglipImageProcessorPil(do_pad=True, pad_size={"height": 300, "width": 300}),
], ids=["no rescale", "no normalize", "no resize", "longest edge", "padding"])
def test_settings_it_does_not_cover_stay_with_the_processor(processor):
    assert exact_preprocessor(processor) is None


def test_the_engine_uses_it_for_clip_and_siglip_and_not_for_siglip2(tmp_path):
    uses = {}
    for family in ("clip", "siglip", "siglip2"):
        engine = Engine(str(save_random_clip(tmp_path / family, family)))
        uses[family] = engine.tokenizer.exact_preprocess is not None
        engine.close()
    assert uses == {"clip": True, "siglip": True, "siglip2": False}
