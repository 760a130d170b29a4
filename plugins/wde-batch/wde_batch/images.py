"""Image inputs of ``wde encode``: an ``image`` field or column of an input file (a path, resolved against the
file's folder; a ``data:image/...;base64,`` URL; Parquet bytes) as the engine's image input, and the engine's
``input N: ...`` errors renamed after the line or row that input came from."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import click

from wde_core.plugin_api import InputError

DATA_URL = "data:"
IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".gif", ".bmp", ".webp", ".tif", ".tiff"}


def image_item(value: Any, base: Path, field: str) -> Any:
    """The engine's image input for one field value: ``bytes``, a ``pathlib.Path`` (relative to ``base``) or
    ``{"image": data_url}``; ``ValueError`` saying why (after ``field 'image'``) when it cannot be one."""
    if isinstance(value, dict) and value and set(value) <= {"bytes", "path"}:  # Hugging Face datasets' Image
        value = value.get("bytes") or value.get("path")
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"field {field!r} must be a file path or a data:image/...;base64, URL, not {_shown(value)}")
    if value.startswith(DATA_URL):
        return {"image": value}
    if "://" in value:
        raise ValueError(f"field {field!r} is a URL ({value[:60]}); wde encode reads local files and "
                         "data:image/...;base64, URLs only")
    path = base / value
    if not path.is_file():
        raise ValueError(f"field {field!r}: no such file {str(path)!r}")
    return path


def refuse_image_files_as_texts(texts: Sequence[str]) -> None:
    """A usage error for a TEXTS argument naming an image file (``wde encode --image *.png`` puts every file
    but the first among the texts, which would be embedded as their names)."""
    for text in texts:
        if Path(text).suffix.lower() in IMAGE_SUFFIXES and Path(text).is_file():
            raise click.UsageError(f"{text!r} names an image file, and an argument is embedded as text: pass it as "
                                   f"--image {text} (one --image per file)")


def given(value: Any) -> bool:
    """Whether a field holds a value: not absent, null or an empty CSV cell."""
    return value is not None and value != ""


def pick(where: str, text: Any, image: Any, fields: tuple[str, str], base: Path) -> Any | None:
    """The input of a record or row holding ``text`` and ``image`` (``None`` for an absent field): the image
    input, or ``None`` when it has no image (the caller checks the text); an error naming ``where`` when
    it has both."""
    column, image_column = fields
    if given(image) and given(text):
        raise click.ClickException(f"{where}: has both {column!r} and {image_column!r}; give one of them")
    if not given(image):
        return None
    try:
        return image_item(image, base, image_column)
    except ValueError as exc:
        raise click.ClickException(f"{where}: {exc}") from None


def renamed(exc: Exception, labels: Sequence[str | None]) -> Exception:
    """An ``InputError`` ``exc`` with its leading ``input N:`` replaced by where input N came from (``in.jsonl line
    4``, ``--image cat.png``), when that is known (by its ``index``); another error as it is."""
    index = exc.index if isinstance(exc, InputError) else None
    if index is None or index >= len(labels) or labels[index] is None:
        return exc
    return type(exc)(f"{labels[index]}: {exc.detail}")


def _shown(value: Any) -> str:
    return "an empty string" if isinstance(value, str) else type(value).__name__
