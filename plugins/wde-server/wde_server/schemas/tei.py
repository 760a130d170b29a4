"""text-embeddings-inference's native API."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from wde_server.schemas import Open, Strict, Text, Texts, TokenIds, TokenInputs
from wde_server.schemas.unions import one_of

Direction = Literal["Left", "Right", "left", "right"]


class TeiEmbedRequest(Strict):
    """``POST /embed`` (and, without ``normalize``/``dimensions``, ``/embed_sparse``)."""

    inputs: TokenInputs
    normalize: bool = True
    truncate: bool | None = None
    truncation_direction: Direction = "Right"
    prompt_name: Text | None = None
    dimensions: int | None = Field(default=None, ge=1)


class TeiSparseRequest(Strict):
    """``POST /embed_sparse``."""

    inputs: TokenInputs
    truncate: bool | None = None
    truncation_direction: Direction = "Right"
    prompt_name: Text | None = None


class SparseValue(Open):
    """One token's weight."""

    index: int
    value: float


class TeiEmbedAllRequest(Strict):
    """``POST /embed_all``: every token's vector (ColBERT vectors for bge-m3)."""

    inputs: TokenInputs
    normalize: bool = False
    truncate: bool | None = None
    truncation_direction: Direction = "Right"
    prompt_name: Text | None = None


class TeiRerankRequest(Strict):
    """``POST /rerank``."""

    query: Text
    texts: list[Text]
    truncate: bool | None = None
    truncation_direction: Direction = "Right"
    raw_scores: bool = False
    return_text: bool = False


class TeiRank(Open):
    """One text's rank entry."""

    index: int
    score: float
    text: str | None = None


PredictInput = one_of((Text, "a string"), (list[Text], "a list of strings"),
                      (list[one_of((Text, "a string"), (list[Text], "a [text, text_pair] pair"))],
                       "a list of strings and [text, text_pair] pairs"))


class TeiPredictRequest(Strict):
    """``POST /predict``: a text, a ``[text, text_pair]``, or a list of either."""

    inputs: PredictInput
    truncate: bool | None = None
    raw_scores: bool = False


class TeiPrediction(Open):
    """One label's score."""

    label: str
    score: float


class SimilarityInputs(Strict):
    """The source sentence and the sentences to compare it with."""

    source_sentence: Text
    sentences: list[Text]


class TeiSimilarityRequest(Strict):
    """``POST /similarity``: cosine similarity of ``source_sentence`` with each sentence."""

    inputs: SimilarityInputs
    truncate: bool | None = None
    truncation_direction: Direction = "Right"
    prompt_name: Text | None = None


class TeiTokenizeRequest(Strict):
    """``POST /tokenize``."""

    inputs: Texts
    add_special_tokens: bool = True
    prompt_name: Text | None = None


class TeiToken(Open):
    """One token: id, text, whether special, and its character span."""

    id: int
    text: str
    special: bool
    start: int | None = None
    stop: int | None = None


IdLists = one_of((TokenIds, "a list of token ids"), (list[TokenIds], "a list of token-id lists"))


class TeiDecodeRequest(Strict):
    """``POST /decode``."""

    ids: IdLists
    skip_special_tokens: bool = True


class TeiInfo(Open):
    """``GET /info``."""

    model_id: str
    model_type: dict
    max_concurrent_requests: int
    max_input_length: int
    max_batch_tokens: int
    max_batch_requests: int
    max_client_batch_size: int
    auto_truncate: bool
    version: str
    models: list[dict]
