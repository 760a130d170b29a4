"""Token classification: vLLM's ``/pooling`` (``task="token_classify"``: every token's class probabilities or
logits) and the Hugging Face Inference API's token-classification payload on ``/token_classification``
(entities grouped as transformers' pipeline groups them)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from wde_server.schemas import Open, Strict, Text, Texts


class PoolingRequest(Strict):
    """``POST /pooling`` (vLLM): ``input`` a string or strings; ``task`` the pooling task (``token_classify``);
    ``use_activation`` (default true) gives each token's softmax over the labels, false its logits."""

    input: Texts
    model: Text | None = None
    task: Literal["token_classify"] = "token_classify"
    use_activation: bool = True
    truncate_prompt_tokens: int | None = Field(default=None, ge=-1)
    encoding_format: Literal["float"] = "float"
    user: Text | None = None


class PoolingData(Open):
    """One input's per-token values ``[tokens][labels]`` (special tokens included, as vLLM returns them)."""

    index: int
    object: Literal["pooling"] = "pooling"
    data: list[list[float]]


class TokenClassificationParameters(Strict):
    """The Inference API's ``parameters``: ``aggregation_strategy`` as transformers' pipeline takes it,
    ``ignore_labels`` (default ``["O"]``), ``stride`` (tokens shared by the windows of a text longer than the
    model's limit)."""

    aggregation_strategy: Literal["none", "simple", "first", "average", "max"] = "simple"
    ignore_labels: list[Text] | None = None
    stride: int | None = Field(default=None, ge=0)


class TokenClassificationRequest(Strict):
    """``POST /token_classification``: ``inputs`` a string (one list of entities back) or strings (one list per
    input); ``truncate`` cuts a text longer than the model's limit (default: the server's ``--auto-truncate``)
    unless ``parameters.stride`` runs it in windows."""

    inputs: Texts
    parameters: TokenClassificationParameters = Field(default_factory=TokenClassificationParameters)
    truncate: bool | None = None

