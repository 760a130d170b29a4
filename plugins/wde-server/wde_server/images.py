"""Image inputs on the embedding routes: a request's inputs as the engine's items (``str`` texts and
``{"image": ...}`` images), each with the request field it came from, so that errors name that field.

The routes only look at a URL's prefix; base64 is decoded, and the images' sizes read from their headers (then
the images decoded by the engine), on the engine's tokenizer thread, never on the event loop. wde fetches no
URL: an ``http(s)`` URL is refused by the engine by name.
"""

from __future__ import annotations

import base64
import binascii
import io
import re
from dataclasses import dataclass, field
from typing import Any, Sequence

from wde_core.plugin_api import InputError

from wde_server.errors import ApiError

IMAGE_ROUTES = frozenset({"/v1/embeddings", "/v2/embed", "/v1/rerank", "/v2/rerank", "/rerank"})  # routes taking images
# (--image-payload-limit)
REMOTE = ("http://", "https://")
DATA_URL = "data:image/"
FIELD = re.compile(r"field '(\w+)' (.*)", re.S)  # "field 'text' has ...": said "the text has ..." after the field


@dataclass
class Inputs:
    """One request's inputs for the engine: ``items`` in order, ``where`` each came from, ``name`` (the
    request's input field), ``texts`` (the text items) and ``images`` (how many images)."""

    name: str
    items: list[Any] = field(default_factory=list)
    where: list[str] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    images: int = 0

    def add_text(self, text: str, where: str) -> None:
        """Append a text."""
        self.items.append(text)
        self.where.append(where)
        self.texts.append(text)

    def add_image(self, source: str, where: str, *, bare_base64: bool) -> None:
        """Append an image given as a URL string (``bare_base64``: a string that is no URL is base64)."""
        if not source.startswith((DATA_URL, *REMOTE)) and (not bare_base64 or source.startswith("data:")):
            raise ApiError(400, f"{where}: expected a data:image/...;base64, URL, got {shown(source)}", param=where)
        self.items.append({"image": source})
        self.where.append(where)
        self.images += 1

    def add_pair(self, text: str, source: str, where: str, *, bare_base64: bool) -> None:
        """Append a text + image input (a VLM embedder's: the image, then the text, as one vector); ``where`` names
        its image, which most errors about the input are about."""
        self.add_image(source, where, bare_base64=bare_base64)
        self.items[-1]["text"] = text
        self.texts.append(text)

    def checked(self) -> list[Any]:
        """The items as ``check_batch`` sees them: an image as its URL string (empty: refused as empty)."""
        return [item["image"] if isinstance(item, dict) else item for item in self.items]


def shown(value: str) -> str:
    """A client's string, cut short for an error message."""
    return repr(value[:40] + ("..." if len(value) > 40 else ""))


def cohere_inputs(body: Any, *, pairs: bool = False) -> Inputs:
    """The inputs of a Cohere ``/v2/embed`` body: exactly one of ``texts``, ``images`` or ``inputs`` (``pairs``: an
    input may hold a text and an image part, embedded together)."""
    given = [name for name in ("texts", "images", "inputs") if getattr(body, name) is not None]
    if len(given) != 1:
        at = given[-1] if given else "texts"
        raise ApiError(400, f"{at}: give exactly one of texts, images or inputs, not {' and '.join(given) or 'none'}",
                       param=at)
    if body.input_type == "image" and given[0] == "texts":
        raise ApiError(400, "input_type: 'image' is for images; texts take search_document, search_query, "
                            "classification or clustering", param="input_type")
    inputs = Inputs(given[0])
    for i, text in enumerate(body.texts or ()):
        inputs.add_text(text, f"texts[{i}]")
    for i, url in enumerate(body.images or ()):
        inputs.add_image(url, f"images[{i}]", bare_base64=False)
    for i, one in enumerate(body.inputs or ()):
        add_content(inputs, one.content, f"inputs[{i}].content", pairs=pairs)
    return inputs


def add_content(inputs: Inputs, content: Sequence[Any], where: str, *, pairs: bool = False) -> None:
    """Append one Cohere input: a single text or image part, or (``pairs``) one text and one image part."""
    if not content:
        raise ApiError(400, f"{where}: empty; give one text or image part", param=where)
    kinds = sorted(part.type for part in content)
    if len(content) > 1 and not (pairs and kinds == ["image_url", "text"]):
        what = "a text, an image, or one text and one image" if pairs else "a text or an image per input, not both"
        raise ApiError(400, f"{where}: {len(content)} parts ({', '.join(kinds)}); this model embeds {what}"
                            f"{'' if pairs else '; send them as separate inputs'}", param=where)
    parts = dict(content_part(part, f"{where}[{i}]") for i, part in enumerate(content))
    if len(parts) == 2:
        inputs.add_pair(parts["text"][0], *parts["image_url"], bare_base64=False)
    elif "text" in parts:
        inputs.add_text(*parts["text"])
    else:
        inputs.add_image(*parts["image_url"], bare_base64=False)


def content_part(part: Any, at: str) -> tuple[str, tuple[str, str]]:
    """A checked content part: its type, and its text or image URL with the field that holds it."""
    wanted, unwanted = ("text", "image_url") if part.type == "text" else ("image_url", "text")
    if getattr(part, wanted) is None or getattr(part, unwanted) is not None:
        raise ApiError(400, f"{at}: a part of type {part.type!r} takes the field {wanted!r} (and not {unwanted!r})",
                       param=at)
    return part.type, (part.text, f"{at}.text") if part.type == "text" else (part.image_url.url, f"{at}.image_url.url")


def jina_inputs(given: Sequence[Any], name: str = "input", *, pairs: bool = False) -> Inputs:
    """The inputs of an ``/v1/embeddings`` body: strings, token-id lists, or (Jina) ``{"text"}``/``{"image"}`` (and,
    ``pairs``, ``{"text", "image"}`` for a VLM embedder)."""
    inputs = Inputs(name)
    for i, item in enumerate(given):
        at = f"{name}[{i}]"
        if isinstance(item, str) or isinstance(item, list):
            inputs.items.append(item)
            inputs.where.append(at)
        elif item.text is not None and item.image is not None and pairs:
            inputs.add_pair(item.text, item.image, f"{at}.image", bare_base64=True)
        elif (item.text is None) == (item.image is None):
            raise ApiError(400, f"{at}: give one of 'text' or 'image'{' (or both)' if pairs else ''}", param=at)
        elif item.text is not None:
            inputs.add_text(item.text, f"{at}.text")
        else:
            inputs.add_image(item.image, f"{at}.image", bare_base64=True)
    return inputs


def engine_items(items: Sequence[Any], where: Sequence[str], max_pixels: int | None) -> list[Any]:
    """``items`` for the engine, each image as its file's bytes (an ``http(s)`` URL as it is, for the engine to
    refuse), on the tokenizer thread; 413 once the images' pixels, read from their headers, pass ``max_pixels``."""
    engine, total = [], 0
    for item, at in zip(items, where):
        if not isinstance(item, dict):
            engine.append(item)
            continue
        source = image_bytes(item["image"], at)
        total += pixels(source)
        if max_pixels is not None and total > max_pixels:
            raise ApiError(413, f"{at}: the request's images reach {total:,} pixels, more than the limit of "
                                f"{max_pixels:,} a request (--max-request-pixels); split the request", param=at)
        engine.append({**item, "image": source})
    return engine


def rerank_items(model: Any, query: str, documents: Sequence[str], field: str,
                 max_pixels: int | None) -> tuple[Any, list[Any]]:
    """A rerank request's query and documents for the engine: for a model that reads images, ``data:image/...``
    documents (and the query of a reranker that scores pairs) as their files' bytes, within ``max_pixels`` in all
    (413 naming ``query`` or ``{field}[i]``); for any other model, as given."""
    if not model.reads_images:
        return query, list(documents)
    image_query = query.startswith(DATA_URL)
    if image_query and "multi_vector" in model.outputs:
        raise ApiError(400, f"query: model {model.name!r} ranks pages and texts against a text query; send the "
                            "query as text", param="query")
    items = [{"image": query} if image_query else query, *({"image": d} if d.startswith(DATA_URL) else d
                                                            for d in documents)]
    read = engine_items(items, ["query", *(f"{field}[{i}]" for i in range(len(documents)))], max_pixels)
    if image_query and max_pixels is not None and len(documents) > 1:  # the query is read with every document
        total = sum(pixels(item["image"]) for item in read if isinstance(item, dict))
        total += pixels(read[0]["image"]) * (len(documents) - 1)
        if total > max_pixels:
            raise ApiError(413, f"query: the query image is read with each of the {len(documents)} {field}: "
                                f"{total:,} pixels in all, more than the limit of {max_pixels:,} a request "
                                "(--max-request-pixels); send fewer of them", param="query")
    return read[0], read[1:]


def rerank_prepared(model: Any, query: str, documents: Sequence[str], field: str, max_pixels: int | None,
                    **kwargs: Any):
    """The model's prepared ranking of ``documents`` for ``query`` (images read by :func:`rerank_items`); for a
    model that reads images, the engine's refusals name ``query`` or ``{field}[i]``."""
    query_item, items = rerank_items(model, query, documents, field, max_pixels)
    try:
        return model.rerank_call(query_item, items, **kwargs)
    except (ValueError, TypeError) as exc:
        if not model.reads_images:
            raise
        raise rerank_named(exc, [f"{field}[{i}]" for i in range(len(items))]) from None


def image_bytes(source: str, where: str) -> str | bytes:
    """An image string's file bytes: a data URL's payload, or (Jina) bare base64; an ``http(s)`` URL as it is."""
    if source.startswith(REMOTE):
        return str(source)
    head, base64_, payload = source.partition(";base64,") if source.startswith("data:") else ("", "", source)
    if head and not base64_:
        raise ApiError(400, f"{where}: expected a data:image/...;base64, URL, got {shown(source)}", param=where)
    try:
        return base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        what = "a data URL whose base64 payload does not decode" if source.startswith("data:") else \
            "neither a data:image/...;base64, URL nor valid base64 of an image file"
        raise ApiError(400, f"{where}: {what}", param=where) from None


def pixels(source: str | bytes) -> int:
    """Width x height from an image file's header (nothing decoded); 0 when unreadable: the engine names it."""
    if not isinstance(source, bytes):
        return 0
    from PIL import Image

    try:
        with Image.open(io.BytesIO(source)) as picture:
            return picture.width * picture.height
    except Exception:  # noqa: BLE001 - not an image, or a bomb: the engine refuses it by name
        return 0


def named(exc: Exception, where: Sequence[str]) -> ApiError:
    """The engine's error about an input (an ``InputError``: its ``index``) as a 400 naming the request field it came
    from; another error as it is."""
    message = str(exc).replace("pass truncate=True", "ask for truncation")
    status = 422 if "max_model_len" in message else 400  # an over-long text, as the server's own check answers
    index = getattr(exc, "index", None) if isinstance(exc, InputError) else None
    if index is None or index >= len(where):
        return ApiError(status, message)
    detail, at = exc.detail.replace("pass truncate=True", "ask for truncation"), where[index]
    field = FIELD.match(detail)
    return ApiError(status, f"{at}: the {field[1]} {field[2]}" if field else f"{at}: {detail}", param=at)


def rerank_named(exc: Exception, where: Sequence[str]) -> ApiError:
    """``named`` for a rerank request, whose engine inputs are (query, document) pairs: an error about a pair's
    query (``input 0 (query): ...``, ``field 'query...'``) names ``query``, not the pair's document."""
    message = str(exc)
    head, _, detail = message.partition(": ")
    query_image = head.startswith("input ") and "(query)" in head  # an image decoded with where="input N (query)"
    if query_image or isinstance(exc, InputError) and exc.detail.startswith("field 'query"):
        return ApiError(422 if "max_model_len" in message else 400, f"query: {detail}", param="query")
    return named(exc, where)


def refuse_images(model: Any, inputs: Inputs) -> None:
    """A text-only model refuses images before any work (400 naming the first image)."""
    if inputs.images and not model.reads_images:
        first = next(at for item, at in zip(inputs.items, inputs.where) if isinstance(item, dict))
        raise ApiError(400, f"{first}: model {model.name!r} reads text only; send images to a model that embeds "
                            "them (CLIP, SigLIP)", param=first)


def check_payload(request: Any, has_images: bool) -> None:
    """A request without images keeps ``--payload-limit`` on the routes that take images (413)."""
    size = getattr(request.state, "body_bytes", 0)
    limit = request.app.state.options.payload_limit
    if not has_images and size > limit:
        raise ApiError(413, f"body: {size} bytes exceed the payload limit of {limit} bytes (--payload-limit) for a "
                            "request without images; split the request")


def tiny_png() -> bytes:
    """A 2 x 2 PNG: the image half of an image model's warm-up."""
    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", (2, 2), (127, 127, 127)).save(buffer, "PNG")
    return buffer.getvalue()
