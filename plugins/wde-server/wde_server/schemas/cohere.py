"""Cohere's embed v2 and rerank v1/v2 APIs, and Jina's rerank API (the same route shape)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from wde_server.schemas import Open, Strict, Text
from wde_server.schemas.unions import one_of

# Cohere's types, and wde's for every token's vector (a late-interaction model's; bge-m3's ColBERT vectors)
EmbeddingType = Literal["float", "int8", "uint8", "binary", "ubinary", "base64", "multi_vector", "multi_vector_base64"]


class ImageUrl(Strict):
    """An image's URL: a ``data:image/...;base64,`` URL (wde fetches no ``http(s)`` URL)."""

    url: Text


class ContentPart(Strict):
    """A part of an input's ``content``: ``{"type": "text", "text": ...}`` or ``{"type": "image_url",
    "image_url": {"url": ...}}``."""

    type: Literal["text", "image_url"]
    text: Text | None = None
    image_url: ImageUrl | None = None


class EmbedInput(Strict):
    """One of ``inputs``: its parts (wde embeds one part per input)."""

    content: list[ContentPart]


class CohereEmbedRequest(Strict):
    """``POST /v2/embed``: one of ``texts``, ``images`` (data URLs) or ``inputs``."""

    model: Text | None = None
    texts: list[Text] | None = None
    images: list[Text] | None = None
    inputs: list[EmbedInput] | None = None
    input_type: Literal["search_document", "search_query", "classification", "clustering", "image"] | None = None
    embedding_types: list[EmbeddingType] = Field(default_factory=lambda: ["float"])
    output_dimension: int | None = Field(default=None, ge=1)
    truncate: Literal["NONE", "START", "END"] = "END"


class BilledUnits(Open):
    """What the request cost."""

    input_tokens: int | None = None
    images: int | None = None
    search_units: int | None = None


class Meta(Open):
    """Cohere's response metadata."""

    api_version: dict = Field(default_factory=lambda: {"version": "2"})
    billed_units: BilledUnits


class CohereEmbedResponse(Open):
    """``POST /v2/embed`` response: one list per requested embedding type."""

    id: str
    embeddings: dict[str, list]
    texts: list[str] | None = None
    meta: Meta
    response_type: Literal["embeddings_by_type"] = "embeddings_by_type"


class DocumentText(Strict):
    """A document given as an object (Cohere v1, Jina)."""

    text: Text


Document = one_of((Text, "a string"), (DocumentText, 'an object {"text": ...}'))


class RerankRequest(Strict):
    """``POST /v1/rerank`` and ``/v2/rerank`` (Cohere v2 and Jina shapes)."""

    model: Text | None = None
    query: Text
    documents: list[Document]
    top_n: int | None = Field(default=None, ge=1)
    return_documents: bool = False
    max_tokens_per_doc: int | None = Field(default=None, ge=1)


class RerankResult(Open):
    """One document's place: its input index and relevance score (and text when asked)."""

    index: int
    relevance_score: float
    document: dict | None = None


class RerankUsage(Open):
    """Tokens computed (Jina's usage)."""

    prompt_tokens: int
    total_tokens: int


class RerankResponse(Open):
    """Rerank response: results best first, with Cohere's ``meta`` and Jina's ``usage``."""

    id: str
    model: str
    results: list[RerankResult]
    usage: RerankUsage
    meta: Meta
