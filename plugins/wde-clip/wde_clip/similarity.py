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
    processor, options = engine.input_processor, EmbedOptions(normalize=True)
    try:
        left = processor.process(a, prompt=prompt, prompt_name=prompt_name, options=options)
    except (TypeError, ValueError) as exc:
        raise type(exc)(f"a: {exc}") from None
    try:
        right = processor.process(b, options=options)
    except (TypeError, ValueError) as exc:
        raise type(exc)(f"b: {exc}") from None
    for request in right:
        request.index += len(left)
    requests = left + right
    truncate = {"truncate": True, "error": False}.get(engine.pipeline.args.long_inputs, True) \
        if truncate is None else truncate
    engine.tokenizer.tokenize(requests, truncate=truncate)

    def collect(results: list[np.ndarray]) -> np.ndarray:
        scores = np.stack(results[:len(left)]) @ np.stack(results[len(left):]).T
        return scores[0 if _single(a) else slice(None)][..., 0 if _single(b) else slice(None)]

    return Call(requests, collect)


def _single(inputs: Any) -> bool:
    return isinstance(inputs, str) or not isinstance(inputs, Sequence) or isinstance(inputs, (bytes, dict))
