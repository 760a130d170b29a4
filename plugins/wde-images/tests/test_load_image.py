"""``load_image`` on its own: every source decodes to the same RGB pixels, transparency lands on white as
transformers' ``convert_to_rgb`` puts it, and what wde does not decode is refused naming the input and field."""

from __future__ import annotations

import base64
import io

import numpy as np
import pytest
from PIL import Image

from wde_core.plugin_api import ImageInput
from wde_images.public import load_image


def png_bytes(picture: Image.Image) -> bytes:
    """``picture`` encoded as a PNG file."""
    buffer = io.BytesIO()
    picture.save(buffer, format="PNG")
    return buffer.getvalue()


def translucent(seed: int = 0) -> Image.Image:
    """A 23 x 17 RGBA image with random colours and alpha."""
    rng = np.random.default_rng(seed)
    return Image.fromarray(rng.integers(0, 256, (17, 23, 4), dtype=np.uint8), "RGBA")


def test_transparency_is_composited_on_white_as_transformers_converts(tmp_path):
    from transformers.image_transforms import convert_to_rgb

    picture = translucent()
    expected = np.asarray(convert_to_rgb(picture, return_numpy=True))
    encoded = png_bytes(picture)
    (tmp_path / "p.png").write_bytes(encoded)
    data_url = "data:image/png;base64," + base64.b64encode(encoded).decode()
    for source in (picture, encoded, tmp_path / "p.png", data_url):
        decoded = load_image(ImageInput(source), "input 0")
        assert decoded.mode == "RGB" and decoded.size == (23, 17)
        assert np.array_equal(np.asarray(decoded), expected), type(source).__name__


@pytest.mark.parametrize("source, message", [
    ("https://example.org/cat.png", "input 3: field 'image' is a remote URL"),
    (b"not an image", "input 3: field 'image' is not an image file PIL can read"),
    ("data:image/png;base64,@@@", "input 3: field 'image' is a data URL whose base64 payload does not decode"),
    ("cat.png", "input 3: field 'image' must be a PIL image, a pathlib.Path, bytes or a data:image/...;base64, URL"),
])
def test_what_it_does_not_decode_is_refused_naming_the_input(source, message):
    with pytest.raises(ValueError) as error:
        load_image(ImageInput(source), "input 3")
    assert str(error.value).startswith(message)


def test_an_image_over_the_pixel_limit_and_a_cut_file_are_refused():
    encoded = png_bytes(translucent())
    with pytest.raises(ValueError, match=r"input 1: field 'image' is 23 x 17 = 391 pixels, over the limit of 390"):
        load_image(ImageInput(encoded), "input 1", max_pixels=390)
    assert load_image(ImageInput(encoded), "input 1", max_pixels=391).size == (23, 17)
    with pytest.raises(ValueError, match=r"input 2: field 'image' could not be decoded .*is the file whole\?"):
        load_image(ImageInput(encoded[: len(encoded) // 2]), "input 2")
