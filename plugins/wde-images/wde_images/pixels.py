"""CLIP's and SigLIP's preprocessing on RGB PIL images, step for step what transformers' PIL-backend processors
do (PIL resize, center crop, rescale in float64 then float32, normalize in float32), without their round trips
through numpy and back to PIL: the same values, bit for bit (tested), in about 70% of the time. Any setting
these do not cover leaves the directory's processor in charge."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import torch

EXACT_PROCESSORS = ("CLIPImageProcessorPil", "SiglipImageProcessorPil")


def exact_preprocessor(processor: Any) -> Callable[[list], torch.Tensor] | None:
    """A function mapping RGB PIL images to ``pixel_values`` ``[n, 3, H, W]`` equal to ``processor``'s, or
    ``None`` where ``processor`` is not one of ``EXACT_PROCESSORS`` with settings this module reproduces."""
    if type(processor).__name__ not in EXACT_PROCESSORS or not _covered(processor):
        return None
    size, crop = processor.size, processor.crop_size if processor.do_center_crop else None
    resample = int(processor.resample if processor.resample is not None else 2)
    mean = np.asarray(processor.image_mean, dtype=np.float32)
    std = np.asarray(processor.image_std, dtype=np.float32)
    scale = processor.rescale_factor

    def preprocess(images: list) -> torch.Tensor:
        arrays = [_normalized(_cropped(_resized(image, size, resample), crop), scale, mean, std) for image in images]
        return torch.from_numpy(np.stack(arrays)).permute(0, 3, 1, 2).contiguous()

    return preprocess


def _covered(processor: Any) -> bool:
    """Resize to a shortest edge or a fixed size, an optional center crop, rescale and normalize, no padding."""
    size, crop = processor.size, getattr(processor, "crop_size", None)
    shortest = bool(size.shortest_edge) and not (size.longest_edge or size.height or size.max_height)
    fixed = bool(size.height and size.width) and not size.shortest_edge
    cropped = not getattr(processor, "do_center_crop", False) or bool(crop and crop.height and crop.width)
    return (processor.do_resize and (shortest or fixed) and cropped and processor.do_rescale
            and processor.do_normalize and not getattr(processor, "do_pad", False)
            and len(processor.image_mean) == 3 and len(processor.image_std) == 3)


def _resized(image, size, resample: int):
    """transformers' ``get_resize_output_image_size`` (``default_to_square=False``) and PIL's resize."""
    width, height = image.size
    if size.shortest_edge:
        short, long = (width, height) if width <= height else (height, width)
        new_short, new_long = size.shortest_edge, int(size.shortest_edge * long / short)
        height, width = (new_long, new_short) if width <= height else (new_short, new_long)
    else:
        height, width = size.height, size.width
    return image.resize((width, height), resample=resample)


def _cropped(image, crop) -> np.ndarray:
    """transformers' ``center_crop``, zero padding included where the image is smaller than the crop."""
    pixels = np.asarray(image)
    if crop is None:
        return pixels
    height, width = pixels.shape[:2]
    top, left = (height - crop.height) // 2, (width - crop.width) // 2
    if top >= 0 and left >= 0:
        return pixels[top:top + crop.height, left:left + crop.width]
    canvas = np.zeros((max(crop.height, height), max(crop.width, width), 3), dtype=pixels.dtype)
    pad_top, pad_left = -(-(canvas.shape[0] - height) // 2), -(-(canvas.shape[1] - width) // 2)
    canvas[pad_top:pad_top + height, pad_left:pad_left + width] = pixels
    top, left = (canvas.shape[0] - crop.height) // 2, (canvas.shape[1] - crop.width) // 2
    return canvas[top:top + crop.height, left:left + crop.width]


def _normalized(pixels: np.ndarray, scale: float, mean: np.ndarray, std: np.ndarray) -> np.ndarray:
    """transformers' ``rescale`` (float64, then float32) and ``normalize`` (float32)."""
    return ((pixels.astype(np.float64) * scale).astype(np.float32) - mean) / std
