"""Videos (as their frames) on the Qwen2-VL and Qwen2.5-VL single-vector embedders, against transformers'
``Qwen2VLModel`` / ``Qwen2_5_VLModel`` given ``pixel_values_videos``: the last token's state within 1e-4 in fp32, with
texts and images in the same call. The reference pixels are laid out as ``Qwen2VLVideoProcessor._preprocess`` does
(transcribed in wde_plugin_kit.image_builders' ``video_pixels``: that processor needs torchvision, which this torch cannot
take), from frames at a size it keeps;
Qwen2.5-VL's temporal positions take ``second_per_grid_ts`` = 2 / fps, as ``Qwen2_5_VLProcessor`` computes it. The
videos compared are no longer in time than in rows or columns: past that, the text after a video starts one past its largest
position in wde (Qwen's own ``get_rope_index`` and vLLM) and at start + max(rows, columns) in transformers 5.24, and
``test_temporal_positions_and_the_text_after_a_video`` pins wde's rule by hand."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from wde_plugin_kit.cpu_info import CPU_BACKENDS
from wde_plugin_kit.image_builders import clip_frames, random_images, video_pixels, video_reference_vector
from wde_plugin_kit.vision_language import save_random_qwen2_5_vl, save_random_qwen2_vl
from test_qwen2_vl_embedder import Processor, reference_vector
from wde_core import Engine

VIDEO = "<|vision_start|><|video_pad|><|vision_end|>"


def reference_video_vector(reference, processor, frames, text: str, **extra) -> np.ndarray:
    """transformers' last-token state of a video (its placeholder, then ``text``), L2-normalized."""
    pixels, grid = video_pixels(frames, processor.images)
    prompt = VIDEO.replace("<|video_pad|>", "<|video_pad|>" * (grid[0] * grid[1] * grid[2] // 4)) + text
    return video_reference_vector(reference, processor.tokenizer, prompt, pixels, grid, **extra)


@pytest.fixture(scope="module")
def qwen2_vl(tmp_path_factory):
    from transformers import Qwen2VLModel

    directory = save_random_qwen2_vl(tmp_path_factory.mktemp("qwen2-vl-video") / "qwen2-vl-tiny")
    reference = Qwen2VLModel.from_pretrained(directory, dtype=torch.float32, attn_implementation="eager").eval()
    return directory, reference, Processor(directory)


def test_the_frames_are_laid_out_as_the_video_processor_does(qwen2_vl):
    directory, _, processor = qwen2_vl
    from wde_vision_language.public import frame_groups

    frames = clip_frames(5, seed=1)
    per_frame = [processor.images(images=[f], return_tensors="pt")["pixel_values"] for f in frames]
    expected, grid = video_pixels(frames, processor.images)
    assert grid == (3, 4, 6)
    got = frame_groups(per_frame, 3, 2)
    torch.testing.assert_close(got, expected, atol=1e-6, rtol=0)
    still = frame_groups([per_frame[0]], 3, 2)  # one frame, repeated: an image is a still two-frame video
    torch.testing.assert_close(still, per_frame[0], atol=0, rtol=0)


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_videos_texts_and_images_match_qwen2_vl_model(qwen2_vl, backend):
    directory, reference, processor = qwen2_vl
    four, five = clip_frames(4, seed=2), clip_frames(5, seed=3)
    picture = random_images(1, seed=4)[0]
    items = ["a cat on a sofa", {"video": four}, {"text": "what happens next?", "video": five, "fps": 1.0}, picture]
    expected = np.stack([reference_vector(reference, processor, items[0]),
                         reference_video_vector(reference, processor, four, ""),
                         reference_video_vector(reference, processor, five, "what happens next?"),
                         reference_vector(reference, processor, picture)])
    with Engine(str(directory), device="cpu", attention_backend=backend) as engine:
        got = engine.encode(items)
    assert np.abs(got - expected).max() <= 1e-4


def test_qwen2_5_vl_video_positions_take_the_frame_rate(tmp_path):
    from transformers import Qwen2_5_VLModel

    directory = save_random_qwen2_5_vl(tmp_path / "qwen2.5-vl-tiny")
    reference = Qwen2_5_VLModel.from_pretrained(directory, dtype=torch.float32, attn_implementation="eager").eval()
    processor = Processor(directory)
    frames = clip_frames(4, seed=5, size=(112, 56))
    fps = 4.0  # 2 frames a group: 0.5 s a group, x tokens_per_second 4: a temporal step of 2
    expected = reference_video_vector(reference, processor, frames, "a short clip",
                                      second_per_grid_ts=torch.tensor([2 / fps]))
    with Engine(str(directory), device="cpu") as engine:
        got = engine.encode([{"text": "a short clip", "video": frames, "fps": fps}])[0]
        slower = engine.encode([{"text": "a short clip", "video": frames, "fps": 1.0}])[0]
    assert np.abs(got - expected).max() <= 1e-4
    assert np.abs(slower - got).max() > 1e-3  # the rate moves the temporal positions


def test_temporal_positions_and_the_text_after_a_video():
    from wde_vision_language.public import mrope_positions

    image, video = 5, 6
    ids = [1, 2, *[video] * 16, 3, 4]  # text, a video of 4 groups of 2 x 2 merged blocks, text
    got = mrope_positions(ids, [(4, 4, 4)], image, 2, video, [1.5])
    start = 2
    times = [start + int(k * 1.5) for k in range(4)]  # 2, 3, 5, 6
    assert got[0, 2:18].tolist() == [t for t in times for _ in range(4)]
    assert got[1, 2:18].tolist() == [start + r for _ in range(4) for r in (0, 0, 1, 1)]
    assert got[2, 2:18].tolist() == [start + c for _ in range(4) for c in (0, 1, 0, 1)]
    # the text after it starts one past the largest position of the video (Qwen's own get_rope_index and vLLM's)
    assert got[:, 18].tolist() == [max(times) + 1] * 3 and got[:, 19].tolist() == [max(times) + 2] * 3


def test_bad_videos_are_refused_naming_the_input_and_the_engine_keeps_serving(qwen2_vl):
    directory = qwen2_vl[0]
    frames = clip_frames(2, seed=6)
    with Engine(str(directory), device="cpu", max_model_len=64) as engine:
        for item, error, message in [
                ({"video": b"an mp4 file"}, TypeError, r"input 1: field 'video': expected a list of frames"),
                ({"video": []}, ValueError, r"input 1: field 'video': no frames"),
                ({"video": [frames[0], "text"]}, TypeError, r"input 1: field 'video': frame 1 is a str, not an image"),
                ({"video": frames, "fps": 0}, ValueError, r"input 1: field 'fps': expected a positive number"),
                ({"video": frames, "frames": 2}, ValueError, r"input 1: field 'frames': a video input takes"),
                ({"video": [frames[0], clip_frames(1, 7, size=(56, 56))[0]]}, ValueError,
                 r"input 1: field 'video': frame 1 preprocesses to 4 x 4 patches, frame 0 to 4 x 6"),
                ({"video": [frames[0], b"not an image"]}, ValueError,
                 r"input 1: field 'video' frame 1: field 'image' is not an image file")]:
            with pytest.raises(error, match=message):
                engine.encode(["fine", item])
        with pytest.raises(ValueError, match=r"input 0: the video input has \d+ tokens, more than max_model_len=64; "
                                             r"raise max_model_len or pass fewer or smaller frames"):
            engine.encode([{"video": clip_frames(24, seed=8)}])  # 12 groups of 6 merged blocks, and 2 more tokens
        assert engine.encode(["still serving", {"video": frames}]).shape == (2, 64)
