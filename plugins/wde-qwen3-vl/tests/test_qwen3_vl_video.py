"""Videos (as their frames) on the Qwen3-VL embedder against transformers' ``Qwen3VLModel`` given
``pixel_values_videos``: each group of two frames after its timestamp, as ``Qwen3VLProcessor.replace_video_token``
writes it (``<t seconds>``, the group's own ``<|vision_start|>`` ... ``<|vision_end|>``, inside the video's
placeholder),
the timestamps from the frame rate as its ``_calculate_timestamps`` computes them; the last token's state within 1e-4
in fp32, with texts and images in the same call. The reference pixels are wde_plugin_kit.image_builders' ``video_pixels`` (the
video processor's layout; the processor needs torchvision)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from qwen3_vl_builders import save_random_qwen3_vl
from wde_plugin_kit.cpu_info import CPU_BACKENDS
from wde_plugin_kit.image_builders import clip_frames, random_images, video_pixels, video_reference_vector
from wde_plugin_kit.vision_language import QWEN_VL_CHAT_TEMPLATE, chat_framed
from test_qwen3_vl_embedder import Processor, reference_vector
from wde_core import Engine

SIZE = (96, 64)  # 6 x 4 patches of 16 px: 3 x 2 merged blocks a group of frames


def timestamps(frames: int, fps: float) -> list[float]:
    """Each group's time: frame i at i / fps, the last frame repeated to an even count, the mean of a pair's two."""
    times = [i / fps for i in range(frames)]
    times += times[-1:] * (frames % 2)
    return [(times[i] + times[i + 1]) / 2 for i in range(0, len(times), 2)]


def reference_video_vector(reference, processor, frames, text: str, fps: float, layout: str = "") -> np.ndarray:
    """transformers' last-token state of a video (its placeholder, each group after its timestamp), then ``text``;
    ``layout``: a chat frame's text with ``<|image_pad|>`` where the video goes, instead."""
    pixels, grid = video_pixels(frames, processor.images, patch=16)
    group = "<|vision_start|>" + "<|video_pad|>" * (grid[1] * grid[2] // 4) + "<|vision_end|>"
    video = "".join(f"<{t:.1f} seconds>{group}" for t in timestamps(len(frames), fps))
    layout = layout or "<|vision_start|><|image_pad|><|vision_end|>" + text
    return video_reference_vector(reference, processor.tokenizer, layout.replace("<|image_pad|>", video), pixels, grid)


@pytest.fixture(scope="module")
def qwen3_vl(tmp_path_factory):
    from transformers import Qwen3VLModel

    directory = save_random_qwen3_vl(tmp_path_factory.mktemp("qwen3-vl-video") / "qwen3-vl-tiny")
    reference = Qwen3VLModel.from_pretrained(directory, dtype=torch.float32, attn_implementation="eager").eval()
    return directory, reference, Processor(directory)


def test_group_timestamps_are_the_processors():
    from wde_vision_language.public import group_times

    assert group_times(4, 2.0, 2) == [0.25, 1.25]  # "<0.2 seconds>", "<1.2 seconds>": qwen-vl-utils' frame lists
    assert group_times(5, 1.0, 2) == timestamps(5, 1.0) == [0.5, 2.5, 4.0]


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_videos_texts_and_images_match_qwen3_vl_model(qwen3_vl, backend):
    directory, reference, processor = qwen3_vl
    four, five = clip_frames(4, seed=2, size=SIZE), clip_frames(5, seed=3, size=SIZE)
    picture = random_images(1, seed=4)[0]
    items = ["a cat on a sofa", {"video": four}, {"text": "what happens next?", "video": five, "fps": 1.0}, picture]
    expected = np.stack([reference_vector(reference, processor, items[0]),
                         reference_video_vector(reference, processor, four, "", 2.0),
                         reference_video_vector(reference, processor, five, "what happens next?", 1.0),
                         reference_vector(reference, processor, picture)])
    with Engine(str(directory), device="cpu", attention_backend=backend) as engine:
        assert engine.pipeline.workflow.name == "qwen3-vl-embed"
        got = engine.encode(items)
        faster = engine.encode([{"text": "what happens next?", "video": five, "fps": 4.0}])[0]
    assert np.abs(got - expected).max() <= 1e-4
    assert np.abs(faster - got[2]).max() > 1e-3  # the rate writes other timestamps


def test_a_video_inside_the_chat_turn(qwen3_vl, tmp_path):
    """With the model's chat template, the video goes where the template puts an image (its placeholder is the
    same, with ``<|video_pad|>``), the instruction as the system turn."""
    import shutil

    directory, reference, processor = qwen3_vl
    chat = tmp_path / "qwen3-vl-chat"
    shutil.copytree(directory, chat)
    (chat / "chat_template.json").write_text(json.dumps({"chat_template": QWEN_VL_CHAT_TEMPLATE}))
    frames = clip_frames(3, seed=8, size=SIZE)
    expected = reference_video_vector(reference, processor, frames, "", 2.0,
                                      layout=chat_framed("Find the clip.", "a red ball", True))
    with Engine(str(chat), device="cpu") as engine:
        got = engine.encode([{"text": "a red ball", "video": frames}], prompt="Find the clip.")[0]
    assert np.abs(got - expected).max() <= 1e-4


def test_frames_take_the_video_processors_pixel_budget(qwen3_vl, tmp_path):
    """With a ``video_preprocessor_config.json`` (Qwen3-VL's: one budget over all of a video's frames), every frame is
    first resized to what its ``smart_resize`` gives the video: 4 frames of 96 x 64 over a 16,384-pixel budget are
    64 x 32 each (beta = sqrt(4 * 64 * 96 / 16,384); 64 / beta and 96 / beta floored to multiples of 32)."""
    import shutil

    from PIL import Image

    directory, reference, processor = qwen3_vl
    budget = tmp_path / "qwen3-vl-video-budget"
    shutil.copytree(directory, budget)
    (budget / "video_preprocessor_config.json").write_text(json.dumps({
        "video_processor_type": "Qwen3VLVideoProcessor", "size": {"shortest_edge": 4096, "longest_edge": 16384},
        "patch_size": 16, "temporal_patch_size": 2, "merge_size": 2, "resample": 3}))
    frames = clip_frames(4, seed=9, size=SIZE)
    resized = [f.resize((64, 32), resample=Image.Resampling.BICUBIC) for f in frames]
    expected = reference_video_vector(reference, processor, resized, "a clip", 2.0)
    with Engine(str(budget), device="cpu") as engine:
        got = engine.encode([{"text": "a clip", "video": frames}])[0]
    with Engine(str(directory), device="cpu") as engine:
        whole = engine.encode([{"text": "a clip", "video": frames}])[0]
    assert np.abs(got - expected).max() <= 1e-4
    assert np.abs(whole - got).max() > 1e-3  # without the video config the frames keep their 96 x 64
