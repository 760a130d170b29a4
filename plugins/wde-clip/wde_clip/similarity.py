"""The ``similarity`` task: cosine similarities between two lists of inputs (texts, images or both) of one
embed model, in one engine call; with an image-text model, texts against images."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from wde_core.plugin_api import Call, EmbedOptions


def similarity(engine, a: Any, b: Any, *, prompt: str | None = None, prompt_name: str | None = None,
               truncate: bool | None = None) -> Any:
    """Cosine similarity of every input of ``a`` with every input of ``b``: float32 ``[len(a), len(b)]``
    (a single input on either side drops that axis). ``prompt``/``prompt_name`` apply to the texts of ``a``
    (the queries); ``truncate`` as in ``encode``."""
    if truncate is None:
        truncate = {"truncate": True, "error": False}.get(engine.pipeline.args.long_inputs, True)
    left = _side(engine, "a", a, truncate, prompt=prompt, prompt_name=prompt_name)
    right = _side(engine, "b", b, truncate)
    for request in right:
        request.index += len(left)
    requests = left + right

    def collect(results: list[np.ndarray]) -> np.ndarray:
        scores = np.stack(results[:len(left)]) @ np.stack(results[len(left):]).T
        return scores[0 if _single(a) else slice(None)][..., 0 if _single(b) else slice(None)]

    return Call(requests, collect)


def _side(engine, name: str, inputs: Any, truncate: bool, **prompts: Any) -> list:
    """One side's requests, tokenized; errors name the side (``"b: input 1: ..."``)."""
    try:
        requests = engine.input_processor.process(inputs, options=EmbedOptions(normalize=True), **prompts)
        engine.tokenizer.tokenize(requests, truncate=truncate)
    except (TypeError, ValueError) as exc:
        raise type(exc)(f"{name}: {exc}") from None
    return requests


def _single(inputs: Any) -> bool:
    return isinstance(inputs, str) or not isinstance(inputs, Sequence) or isinstance(inputs, (bytes, dict))
