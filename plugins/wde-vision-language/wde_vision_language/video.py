"""Videos for the single-vector vision-language embedders: a video is given as its sampled frames (images, in order)
and their rate; each frame is preprocessed as the directory's image processor preprocesses an image, and every two
frames become one group of temporal patches (``temporal_patch_size`` 2, the last frame repeated for an odd count), as
transformers' ``Qwen2VLVideoProcessor`` lays out ``pixel_values_videos`` (Qwen3-VL: each group after its timestamp,
``group_times``). Decoding a video file is left to the caller (PyAV, decord, torchcodec, OpenCV): wde takes the
frames."""

from __future__ import annotations

import json
import math
import numbers
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from wde_core.plugin_api import ImageInput, InputTypeError, InputValueError, as_image_input

DEFAULT_FPS = 2.0  # the rate qwen-vl-utils gives a list of frames that comes without one
VIDEO = "<|vision_start|><|video_pad|><|vision_end|>"  # a video's placeholder, before the text (plain framing)
FIELDS = {"video", "fps", "text"}


@dataclass(frozen=True)
class VideoFrames:
    """A video as its frames (image inputs, in order) and their rate in frames per second."""

    frames: tuple[ImageInput, ...]
    fps: float


def video_input(index: int, item: dict) -> tuple[str | None, VideoFrames]:
    """``(text or None, frames)`` of a ``{"video": [frames], "fps": rate, "text": str}`` input (``fps`` and ``text``
    optional), or an error naming the input and field."""
    unknown = sorted(set(item) - FIELDS)
    if unknown:
        raise InputValueError(index, f"field {unknown[0]!r}: a video input takes 'video' (its frames), 'fps' and "
                         "'text'")
    frames = item["video"]
    if isinstance(frames, (str, bytes, dict)) or not isinstance(frames, (list, tuple)):
        raise InputTypeError(index, f"field 'video': expected a list of frames (images: PIL images, paths, bytes "
                        f"or data URLs), got {type(frames).__name__}; decode a video file into frames first")
    if len(frames) == 0:
        raise InputValueError(index, "field 'video': no frames")
    images = []
    for k, frame in enumerate(frames):
        data_url = isinstance(frame, str) and frame.startswith("data:image/")
        image = as_image_input(frame) or (ImageInput(frame) if data_url else None)
        if image is None:
            raise InputTypeError(index, f"field 'video': frame {k} is a {type(frame).__name__}, not an image")
        images.append(image)
    fps = item.get("fps", DEFAULT_FPS)
    if isinstance(fps, bool) or not isinstance(fps, numbers.Real) or not 0 < fps < math.inf:
        raise InputValueError(index, f"field 'fps': expected a positive number of frames per second, got {fps!r}")
    text = item.get("text")
    if text is not None and not isinstance(text, str):
        raise InputTypeError(index, f"field 'text' must be a str, got {type(text).__name__}")
    return text, VideoFrames(tuple(images), float(fps))


def frame_groups(frames: list[torch.Tensor], channels: int, temporal: int) -> torch.Tensor:
    """The video's patches ``[groups * h * w, C * temporal * P * P]`` from each frame's patches as the image
    processor flattens an image (``[h * w, C * temporal * P * P]``, its one frame repeated ``temporal`` times):
    frames ``temporal * g`` .. ``temporal * g + temporal - 1`` side by side in group ``g``, the last frame repeated to
    fill the last group."""
    frames = frames + [frames[-1]] * (-len(frames) % temporal)
    rows = frames[0].shape[0]
    alone = [f.view(rows, channels, temporal, -1)[:, :, 0] for f in frames]  # [h * w, C, P * P]: one copy
    groups = [torch.stack(alone[g:g + temporal], dim=2).reshape(rows, -1) for g in range(0, len(alone), temporal)]
    return torch.cat(groups)


def check_frame_sizes(grids: list[tuple[int, int, int]], index: int) -> None:
    """Every frame of a video must come out of preprocessing at one size; else an error naming the frames."""
    for k, grid in enumerate(grids):
        if grid != grids[0]:
            raise InputValueError(index, f"field 'video': frame {k} preprocesses to {grid[1]} x {grid[2]} patches, "
                             f"frame 0 to {grids[0][1]} x {grids[0][2]}; give frames of one size")


def time_interval(vision_config, fps: float) -> float:
    """The temporal position step between a video's frame groups: Qwen2.5-VL's ``tokens_per_second`` x the seconds a
    group spans (``temporal_patch_size / fps``); 1 for Qwen2-VL, whose config has no ``tokens_per_second``."""
    per_second = getattr(vision_config, "tokens_per_second", None)
    return 1.0 if per_second is None else per_second * vision_config.temporal_patch_size / fps


def group_times(frames: int, fps: float, temporal: int) -> list[float]:
    """Qwen3-VL's timestamp of each group of frames, in seconds: the mean of its first and last frame's time (frame
    ``i`` at ``i / fps``; the last frame repeated to fill the last group), as ``Qwen3VLProcessor`` computes them."""
    times = [i / fps for i in range(frames)] + [(frames - 1) / fps] * (-frames % temporal)
    return [(times[g] + times[g + temporal - 1]) / 2 for g in range(0, len(times), temporal)]


@dataclass(frozen=True)
class VideoSizing:
    """A directory's ``video_preprocessor_config.json`` pixel range: per frame (``Qwen2VLVideoProcessor``) or over
    all of a video's frames (``Qwen3VLVideoProcessor``), and the resampling filter."""

    min_pixels: int
    max_pixels: int
    whole_video: bool
    resample: int


def video_sizing(directory: Path) -> VideoSizing | None:
    """The video processor's own size range, if the directory has a ``video_preprocessor_config.json`` (without one,
    transformers' video processor takes the image processor's: frames are then resized as images)."""
    path = Path(directory) / "video_preprocessor_config.json"
    if not path.is_file():
        return None
    config = json.loads(path.read_text(encoding="utf-8"))
    size = config.get("size") or {}
    low, high = size.get("shortest_edge", config.get("min_pixels")), size.get("longest_edge", config.get("max_pixels"))
    if low is None or high is None:
        return None
    return VideoSizing(int(low), int(high), "Qwen3VL" in str(config.get("video_processor_type", "")),
                       int(config.get("resample", 3)))


def frame_size(sizing: VideoSizing, frames: int, height: int, width: int, factor: int,
               temporal: int) -> tuple[int, int]:
    """``(height, width)`` every frame is resized to, by transformers' own ``smart_resize`` of the video processor:
    Qwen3-VL's over the video's frames (at least ``temporal`` of them), Qwen2-VL's per frame."""
    if sizing.whole_video:
        from transformers.models.qwen3_vl.video_processing_qwen3_vl import smart_resize

        return smart_resize(max(frames, temporal), height, width, temporal_factor=temporal, factor=factor,
                            min_pixels=sizing.min_pixels, max_pixels=sizing.max_pixels)
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize

    return smart_resize(height, width, factor=factor, min_pixels=sizing.min_pixels, max_pixels=sizing.max_pixels)


def is_video(item: Any) -> bool:
    """Whether an input item is a video dict."""
    return isinstance(item, dict) and "video" in item
