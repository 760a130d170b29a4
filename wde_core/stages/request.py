"""Requests and per-call options, as they travel through the stages; what counts as an image input (a vision
workflow's stages decode it: wde-images' ``load_image``, with its limits and errors); the errors refusing an input."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import PurePath
from typing import Any


class InputError(Exception):
    """An input of a call refused before any work: ``str()`` is ``"input N: detail"``, ``index`` is N (a front end
    names where input N came from by it), ``detail`` the rest. Raised as :class:`InputValueError` or
    :class:`InputTypeError`; one re-raised with a single message (``type(exc)(message)``) has no ``index``."""

    def __init__(self, index: int | str, detail: str | None = None) -> None:
        super().__init__(index if detail is None else f"input {index}: {detail}")
        self.index, self.detail = (None, index) if detail is None else (index, detail)

    def __reduce__(self):
        return type(self), (self.detail,) if self.index is None else (self.index, self.detail)


class InputValueError(InputError, ValueError):
    """An input refused for its value (too long, not an image, ...)."""


class InputTypeError(InputError, TypeError):
    """An input refused for its type."""


@dataclass(frozen=True)
class ImageInput:
    """An image input as given, not yet decoded: a ``PIL.Image.Image``, a ``pathlib.Path`` to an image file, the
    file's ``bytes``, or (from ``{"image": x}``) any of those or a ``data:image/...;base64,`` URL."""

    source: Any


def as_image_input(item: Any) -> ImageInput | None:
    """``item`` as an :class:`ImageInput` (``{"image": x}``, PIL image, path, bytes), else ``None``: a str is text."""
    if isinstance(item, dict) and set(item) == {"image"}:
        return ImageInput(item["image"])
    if isinstance(item, (bytes, bytearray, memoryview, PurePath)) or type(item).__module__.startswith("PIL."):
        return ImageInput(item)
    return None


@dataclass(frozen=True)
class EmbedOptions:
    """Per-request output options of the embed task (``None`` means the model's setting)."""

    normalize: bool | None = None
    dimensions: int | None = None
    output: tuple[str, ...] = ("dense",)


@dataclass(frozen=True)
class TokenEmbedOptions:
    """Per-request options of the token_embed task: every token's vector, optionally L2-normalized."""

    normalize: bool = False
    output: tuple[str, ...] = ("tokens",)


@dataclass(frozen=True)
class ScoreOptions:
    """Per-request options of the rerank and classify tasks."""

    raw_scores: bool = False
    output: tuple[str, ...] = ("scores",)


@dataclass
class Request:
    """One input: its position in the caller's list, the text to tokenize and its token ids (an image input:
    ``image``, the :class:`~wde_core.runtime.images.ImageInput`, then its pixels once preprocessed)."""

    index: int
    text: Any
    options: Any = None
    prompt: str | None = None
    token_ids: list[int] = field(default_factory=list)
    image: Any = None
    token_type_ids: list[int] | None = None
    prompt_len: int = 0
    call_id: int | None = None
    tenant: str | None = None  # who sent it (e.g. an API key's name): the scheduler takes turns between tenants
    scheduled_at: float | None = None  # time.perf_counter() when its batch was formed
    shared_prefix: str | None = None  # requests with the same key begin with the same text: a causal model's
    # batch may hold their common leading tokens once (wde_core.stages.shared_prefix)
    vision_tokens: int = 0  # patches an image input runs through a vision tower before its tokens: the scheduler
    # counts them against the batch's token budget too

    @property
    def num_tokens(self) -> int:
        """The number of tokens the request occupies in a batch."""
        return len(self.token_ids)
