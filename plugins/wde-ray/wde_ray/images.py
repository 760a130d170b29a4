"""Image columns: each row's value (binary bytes, a file path, a ``data:image/...;base64,`` URL, or a Hugging Face
``datasets`` image struct ``{"bytes", "path"}``) as the engine's image input, or why it cannot be one."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

EXPECTED = "expected an image (bytes, a file path or a data:image/...;base64, URL)"


@dataclass(frozen=True)
class BadValue:
    """A row value that is no image input, with the reason (``check`` reports it as the row's problem)."""

    message: str


def image_item(value: Any, root: str | None) -> Any:
    """The engine's image input for one row's value (a relative path joined to ``root`` when given), or a
    :class:`BadValue` saying why it is not one."""
    if isinstance(value, dict) and value and set(value) <= {"bytes", "path"}:  # datasets.Image, in Parquet
        value = value.get("bytes") or value.get("path")
    if isinstance(value, (bytes, bytearray)):
        return bytes(value) if value else BadValue("empty bytes: expected an image file's contents")
    if not isinstance(value, str):
        return BadValue(f"{EXPECTED}, got {type(value).__name__}")
    if value.startswith("data:"):
        return {"image": value}
    if not value.strip():
        return BadValue(f"{EXPECTED}, got an empty string")
    if "://" in value:
        return BadValue(f"a URL ({value[:60]}); wde fetches nothing: give the image's bytes or a path every "
                        "actor can read")
    return Path(root, value) if root else Path(value)


def warm_up_image() -> Any:
    """A small white image: an image column's actor warms its engine with it (a vision-only model reads no text)."""
    from PIL import Image

    return Image.new("RGB", (32, 32), "white")
