"""The ``token_classify`` task (``classify_tokens``): each token's labels from a token-classification model (NER,
PII), with its character offsets; word pieces grouped into entities by transformers' own token-classification
pipeline code (``TokenClassificationPipeline.postprocess``), run on wde's logits, so groups, spans, words and
scores are the pipeline's. The model's forward returns the logits ``[T, num_labels]`` as its token states: the
``token_embed`` path (``TokenEmbedOptions``, the pooler's ``"tokens"``) carries them back."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import numpy as np

from wde_core.stages.request import InputValueError, Request, TokenEmbedOptions
from wde_core.tasks import Call, long_input_policy

AGGREGATIONS = ("none", "simple", "first", "average", "max")  # transformers' AggregationStrategy values


@dataclass
class Window(Request):
    """A request for one text (or, with ``stride``, one window of it) and what the pipeline's post-processing
    reads: the text's index (``owner``), the offsets and special-tokens mask; ``logits`` once computed."""

    owner: int = 0
    offsets: list = field(default_factory=list)
    special: list = field(default_factory=list)
    logits: Any = None


def classify_tokens(context, texts: str | Sequence[str], *, aggregation: str | None = None, stride: int | None = None,
                    ignore_labels: Sequence[str] | None = None, truncate: bool | None = None) -> Any:
    """Per-token labels of ``texts`` (the ``token_classify`` task: NER, PII): one result per text (a single string
    gives one).

    ``aggregation=None``: a dict of every token (special ones included): ``tokens``, ``offsets`` int64
    ``[n, 2]`` (character start, end), ``special`` bool ``[n]``, ``logits`` float32 ``[n, labels]``, ``labels``
    (argmax, via ``id2label``) and ``scores`` float32 ``[n]`` (their softmax probability). ``"none"``,
    ``"simple"``, ``"first"``, ``"average"``, ``"max"``: the list of entities transformers' token-classification
    pipeline returns with that ``aggregation_strategy`` (``entity_group`` or ``entity``, ``score``, ``word``,
    ``start``, ``end``), labels in ``ignore_labels`` (default ``["O"]``) left out. ``stride``: a longer text runs
    in windows of ``max_model_len`` tokens overlapping by ``stride``, resolved as the pipeline's ``stride``
    (needs an aggregation other than ``"none"``); else ``truncate``: ``True`` cuts, ``False`` refuses an
    over-long text, ``None`` follows ``long_inputs``."""
    tokenizer = context.tokenizer.tokenizer
    limit = context.pipeline.settings.max_model_len
    check_arguments(aggregation, stride, ignore_labels, truncate, limit - tokenizer.num_special_tokens_to_add())
    policy = None if stride is not None else _policy(context, truncate)
    requests = context.input_processor.process(texts, options=TokenEmbedOptions())
    if any(r.prompt for r in requests):
        raise ValueError("classify_tokens takes no prompt: the model's default prompt would shift the offsets")
    windows = tokenize_windows(context, [r.text for r in requests], stride, policy)
    labels = {int(i): str(label) for i, label in context.pipeline.model.config.id2label.items()}
    single = isinstance(texts, str)

    def collect(results: list[np.ndarray]) -> Any:
        per_text: list[list[Window]] = [[] for _ in requests]
        for window, logits in zip(windows, results):
            window.logits = logits
            per_text[window.owner].append(window)
        out = [finish(tokenizer, labels, r.text, per_text[r.index], aggregation, ignore_labels) for r in requests]
        return out[0] if single else out

    return Call(windows, collect)


def check_arguments(aggregation: Any, stride: Any, ignore_labels: Any, truncate: Any, max_stride: int) -> None:
    """Refuse an unknown aggregation, a bad or misplaced ``stride``, ``ignore_labels`` that are not a list of str."""
    if aggregation is not None and aggregation not in AGGREGATIONS:
        raise ValueError(f"aggregation={aggregation!r}: expected None or one of {', '.join(AGGREGATIONS)}")
    if stride is not None:
        if not isinstance(stride, int) or isinstance(stride, bool) or not 0 <= stride < max_stride:
            raise ValueError(f"stride={stride!r}: expected an integer from 0 to {max_stride - 1} (the tokens of "
                             "max_model_len less the special tokens)")
        if aggregation in (None, "none"):
            raise ValueError(f"stride={stride} needs an aggregation that resolves overlapping windows: 'simple', "
                             f"'first', 'average' or 'max', not {aggregation!r}")
        if truncate is not None:
            raise ValueError("pass stride (windows over a long text) or truncate, not both")
    if ignore_labels is not None:
        if aggregation is None:
            raise ValueError("ignore_labels applies to an aggregation; aggregation=None returns every token")
        if not isinstance(ignore_labels, (list, tuple)) or not all(isinstance(label, str) for label in ignore_labels):
            raise TypeError(f"ignore_labels: expected a list of str, got {ignore_labels!r}")


def _policy(context, truncate: bool | None) -> bool:
    if truncate is None and context.pipeline.args.long_inputs == "chunk":
        raise ValueError("long_inputs='chunk' does not apply to classify_tokens: pass stride=N for overlapping "
                         "windows, or truncate=True or False")
    return long_input_policy(context, truncate, chunk_ok=False)


def tokenize_windows(context, texts: list[str], stride: int | None, truncate: bool | None) -> list[Window]:
    """One request per text, or per window of it with ``stride``: the pipeline's encoding (offsets, special
    tokens mask), windows of ``max_model_len`` tokens; ``owner`` is the text's index."""
    stage, max_len = context.tokenizer, context.pipeline.settings.max_model_len
    typed = getattr(stage, "uses_token_types", False)
    cut = stride is not None or truncate is True
    windowed = {"stride": stride, "return_overflowing_tokens": True} if stride is not None else {}
    encoded = stage.tokenizer(texts, truncation=cut, max_length=max_len if cut else None,
                              return_offsets_mapping=True, return_special_tokens_mask=True,
                              return_attention_mask=False, return_token_type_ids=typed, verbose=False, **windowed)
    owners = encoded["overflow_to_sample_mapping"] if stride is not None else range(len(texts))
    windows = []
    for k, owner in enumerate(owners):
        window = Window(k, texts[owner], TokenEmbedOptions(), token_ids=encoded["input_ids"][k],
                        token_type_ids=encoded["token_type_ids"][k] if typed else None, owner=owner,
                        offsets=encoded["offset_mapping"][k], special=encoded["special_tokens_mask"][k])
        if window.num_tokens > max_len:
            raise InputValueError(owner, f"field 'text' has {window.num_tokens} tokens, more than "
                             f"max_model_len={max_len}; shorten it, pass truncate=True, or stride=N for windows")
        windows.append(window)
    return windows


def finish(tokenizer, labels: dict[int, str], text: str, windows: list[Window], aggregation: str | None,
           ignore_labels: Sequence[str] | None) -> Any:
    """One text's result from its windows' logits: the per-token dict, or the entities of transformers'
    ``TokenClassificationPipeline.postprocess`` (built without a model: it reads only the tokenizer and
    ``model.config.id2label``), numpy scalars made Python numbers."""
    if aggregation is None:
        return token_record(tokenizer, labels, windows[0])
    import torch
    from transformers.pipelines.token_classification import AggregationStrategy, TokenClassificationPipeline

    postprocessor = TokenClassificationPipeline.__new__(TokenClassificationPipeline)
    postprocessor.tokenizer, postprocessor.model = tokenizer, SimpleNamespace(config=SimpleNamespace(id2label=labels))
    postprocessor.framework = "pt"  # transformers 4.x's postprocess reads it (5.x has torch only)
    outputs = [{"logits": torch.from_numpy(w.logits)[None], "input_ids": torch.tensor([w.token_ids]),
                "offset_mapping": torch.tensor([w.offsets]), "special_tokens_mask": torch.tensor([w.special]),
                "sentence": text, "word_ids": None} for w in windows]
    entities = postprocessor.postprocess(outputs, AggregationStrategy(aggregation), ignore_labels)
    return [{k: v.item() if isinstance(v, np.generic) else v for k, v in entity.items()} for entity in entities]


def token_record(tokenizer, labels: dict[int, str], window: Window) -> dict[str, Any]:
    """Every token of one text: tokens, offsets, special mask, logits, argmax labels and their probabilities."""
    logits = np.asarray(window.logits, dtype=np.float32)
    shifted = np.exp(logits - logits.max(axis=-1, keepdims=True))  # the pipeline's softmax
    probabilities = shifted / shifted.sum(axis=-1, keepdims=True)
    best = probabilities.argmax(axis=-1)
    return {"tokens": tokenizer.convert_ids_to_tokens(window.token_ids),
            "offsets": np.asarray(window.offsets, dtype=np.int64).reshape(-1, 2),
            "special": np.asarray(window.special, dtype=bool), "logits": logits,
            "labels": [labels[int(i)] for i in best],
            "scores": np.take_along_axis(probabilities, best[:, None], axis=-1)[:, 0].astype(np.float32)}
