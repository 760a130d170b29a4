"""Decoding image inputs safely, before any batch runs: remote ``http(s)`` URLs are refused (wde fetches
nothing), images over ``MAX_IMAGE_PIXELS`` are refused from their header before decoding, and a file that is
not a whole image in a mode wde converts is refused naming the input."""

from __future__ import annotations

import base64
import binascii
import io
import os
from pathlib import PurePath
from typing import Any

from wde_core.plugin_api import ImageInput, InputValueError

MAX_IMAGE_PIXELS = int(os.environ.get("WDE_MAX_IMAGE_PIXELS", 50_000_000))  # 50 megapixels, e.g. 8,660 x 5,773
MODES = ("1", "L", "LA", "P", "PA", "RGB", "RGBA", "RGBX", "RGBa", "CMYK", "YCbCr", "La")  # all convert to RGB


def load_image(image: ImageInput, where: int | str, *, max_pixels: int = MAX_IMAGE_PIXELS):
    """Decode ``image`` to an RGB ``PIL.Image.Image`` (transparency over white, as transformers converts); for
    anything but a whole, supported image an ``InputValueError`` of input number ``where``, or a ``ValueError``
    starting with ``where`` when it is a place (``"input 3: field 'video' frame 2"``)."""
    from PIL import Image, UnidentifiedImageError

    picture = image.source if isinstance(image.source, Image.Image) else None
    if picture is None:
        try:
            picture = Image.open(io.BytesIO(_image_bytes(image.source, where)))
        except UnidentifiedImageError:
            raise _refused(where, "field 'image' is not an image file PIL can read") from None
        except Image.DecompressionBombError as exc:  # PIL's own limit, far above ours: refused from the header
            raise _refused(where, f"field 'image' is over the limit of {max_pixels:,} pixels ({exc})") from None
    width, height = picture.size
    if width * height > max_pixels:
        raise _refused(where, f"field 'image' is {width} x {height} = {width * height:,} pixels, over the limit "
                         f"of {max_pixels:,} pixels (WDE_MAX_IMAGE_PIXELS); scale it down first")
    if picture.mode not in MODES:
        raise _refused(where, f"field 'image' has mode {picture.mode!r}, which wde does not convert to RGB "
                         f"(modes: {', '.join(MODES)}); convert it first")
    try:
        picture.load()
    except (OSError, SyntaxError, ValueError) as exc:
        raise _refused(where, f"field 'image' could not be decoded ({exc}); is the file whole?") from None
    if "A" in picture.getbands() or "transparency" in picture.info:
        white = Image.new("RGBA", picture.size, (255, 255, 255, 255))
        return Image.alpha_composite(white, picture.convert("RGBA")).convert("RGB")
    return picture if picture.mode == "RGB" else picture.convert("RGB")


def _refused(where: int | str, detail: str) -> ValueError:
    return InputValueError(where, detail) if isinstance(where, int) else ValueError(f"{where}: {detail}")


def _image_bytes(source: Any, where: int | str) -> bytes:
    """The encoded image file behind a path, bytes or data URL."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        return bytes(source)
    if isinstance(source, PurePath):
        try:
            return open(source, "rb").read()
        except OSError as exc:
            raise _refused(where, f"field 'image': cannot read {str(source)!r} ({exc.strerror})") from None
    if isinstance(source, str) and source.startswith(("http://", "https://")):
        raise _refused(where, f"field 'image' is a remote URL; wde does not fetch URLs: send the image "
                         "itself, as bytes or a data:image/...;base64, URL")
    if not (isinstance(source, str) and source.startswith("data:image/") and ";base64," in source):
        raise _refused(where, f"field 'image' must be a PIL image, a pathlib.Path, bytes or a "
                         f"data:image/...;base64, URL, not {_shown(source)}")
    try:
        return base64.b64decode(source.partition(";base64,")[2], validate=True)
    except (binascii.Error, ValueError):
        raise _refused(where, "field 'image' is a data URL whose base64 payload does not decode") from None


def _shown(value: Any) -> str:
    return f"the str {value[:40]!r}" if isinstance(value, str) else f"a {type(value).__name__}"
