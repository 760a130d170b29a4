"""OpenAI's embeddings and models API, and vLLM's ``/score`` and ``/classify``."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, StrictInt

from wde_server.schemas import Open, Strict, Text, Texts, TokenInputs
from wde_server.schemas.unions import one_of


class InputObject(Strict):
    """A Jina input given as an object: ``{"text": ...}``, or ``{"image": ...}`` with a ``data:image/...;base64,``
    URL or the bare base64 of the image file."""

    text: Text | None = None
    image: Text | None = None


EmbeddingInputs = TokenInputs | one_of((list[one_of((Text, "a string"), (InputObject, "an object"))],
                                        "a list of strings and objects"))


Spans = list[list[StrictInt]]
LateChunks = one_of((Literal["sentences"], '"sentences"'), (dict[Literal["sentences", "tokens"], StrictInt],
                                                            'an object {"sentences": k} or {"tokens": n}'),
                    (Spans, "a list of [start, end] spans"), (list[Spans], "a list of span lists, one per input"))


class EmbeddingRequest(Strict):
    """``POST /v1/embeddings``: a string, strings, a token-id list or lists of them; or (Jina) a list of
    strings, ``{"text": ...}`` and ``{"image": ...}`` objects. ``late_chunks`` (wde): late chunking of texts,
    one embedding per chunk; ``late_overlap``: the tokens its windows share beyond the model's length."""

    input: EmbeddingInputs
    model: Text | None = None
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = Field(default=None, ge=1)
    user: Text | None = None
    late_chunks: LateChunks | None = None
    late_overlap: int | None = Field(default=None, ge=0)


class Embedding(Open):
    """One input's vector (a list of floats, or base64 of little-endian float32 values); with ``late_chunks``,
    one chunk's, with its input's index and its ``[start, end)`` character span."""

    object: Literal["embedding"] = "embedding"
    index: int
    embedding: list[float] | str
    input_index: int | None = None
    span: list[int] | None = None


class Usage(Open):
    """Tokens the request computed."""

    prompt_tokens: int
    total_tokens: int


class EmbeddingResponse(Open):
    """``POST /v1/embeddings`` response."""

    object: Literal["list"] = "list"
    data: list[Embedding]
    model: str
    usage: Usage


class ModelCard(Open):
    """One served model, as ``GET /v1/models`` lists it."""

    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "wde"
    task: str
    max_model_len: int


class ModelList(Open):
    """``GET /v1/models`` response."""

    object: Literal["list"] = "list"
    data: list[ModelCard]


class ScoreRequest(Strict):
    """vLLM ``POST /score``: one ``text_1`` against every ``text_2`` (1-to-N), or pairwise (N-to-N)."""

    model: Text | None = None
    text_1: Texts
    text_2: Texts
    truncate: bool | None = None


class ScoreData(Open):
    """One pair's score."""

    index: int
    object: Literal["score"] = "score"
    score: float


class ScoreResponse(Open):
    """vLLM ``POST /score`` response."""

    id: str
    object: Literal["list"] = "list"
    created: int
    model: str
    data: list[ScoreData]
    usage: Usage


class ClassifyRequest(Strict):
    """vLLM ``POST /classify``: texts to label."""

    model: Text | None = None
    input: Texts
    truncate: bool | None = None


class ClassifyData(Open):
    """One text's label and per-label probabilities."""

    index: int
    object: Literal["classification"] = "classification"
    label: str
    probs: list[float]
    num_classes: int


class ClassifyResponse(Open):
    """vLLM ``POST /classify`` response."""

    id: str
    object: Literal["list"] = "list"
    created: int
    model: str
    data: list[ClassifyData]
    usage: Usage
