"""The sparse-encoder workflow's own stages: the Router route of each request (from ``prompt_name``), the static
routes' tokenization, the batch's per-sequence routes, and the ``max_active_dims`` engine argument."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

import torch

from wde_core.plugin_api import EmbedOptions, EngineArgs, FlatBatchBuilder, HFTokenizer, ModelInput, TextInputProcessor
from wde_core.plugin_api import InputValueError
from wde_splade.files import resolve_route


@dataclass
class SpladeEngineArgs(EngineArgs):
    """The core's arguments plus ``max_active_dims``: keep only that many largest weights of every vector
    (``None``: the directory's ``config_sentence_transformers.json``, else all)."""

    max_active_dims: int | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        value = self.max_active_dims
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
            raise ValueError(f"engine argument max_active_dims={value!r}: expected a positive integer")


@dataclass(frozen=True)
class RoutedOptions(EmbedOptions):
    """Embed options plus the Router route the request takes (``None``: the MLM, no Router)."""

    route: str | None = None


def route_of(request) -> str | None:
    """The Router route of a request (``None`` for token_embed requests and models without a Router)."""
    return getattr(request.options, "route", None)


class RoutedInputProcessor(TextInputProcessor):
    """Texts as the core's processor makes them; for a Router model, each request's route: the route
    ``prompt_name`` (else the default prompt name) names, else the Router's default route."""

    def __init__(self, pipeline) -> None:
        super().__init__(pipeline)
        self.layout = pipeline.settings.extras["splade"]

    def process(self, inputs, *, prompt=None, prompt_name=None, options=None):
        """The core's requests, with :class:`RoutedOptions` for a Router model's embed requests."""
        requests = super().process(inputs, prompt=prompt, prompt_name=prompt_name, options=options)
        if self.layout["mlm_route"] is None or not type(requests[0].options) is EmbedOptions:
            return requests
        task = prompt_name if prompt_name is not None or prompt is not None else self.settings.default_prompt_name
        routed = RoutedOptions(**asdict(requests[0].options), route=resolve_route(self.layout, task))
        for request in requests:
            request.options = routed
        return requests

    def check_options(self, options) -> None:
        """Refuse ``dimensions``: a sparse encoder's vector spans the vocabulary, its first ids are no summary."""
        if getattr(options, "dimensions", None) is not None:
            raise ValueError(f"dimensions={options.dimensions!r}: a sparse encoder's vectors span the vocabulary "
                             "(one weight per token id) and cannot be truncated; use max_active_dims")


class RoutedTokenizer(HFTokenizer):
    """The MLM's tokenizer for the MLM route; a static route's own tokenizer, no special tokens (as
    ``SparseStaticEmbedding.preprocess``), cut at its ``model_max_length`` unless ``truncate=False`` refuses."""

    def __init__(self, pipeline) -> None:
        super().__init__(pipeline)
        from transformers import AutoTokenizer

        layout = pipeline.settings.extras["splade"]
        self.static = {route: AutoTokenizer.from_pretrained(folder, use_fast=True)
                       for route, folder in layout["static_routes"].items()}

    def tokenize(self, requests, *, truncate=True) -> None:
        """Fill each request's token ids with its route's tokenizer."""
        mlm = [r for r in requests if route_of(r) not in self.static]
        if mlm:
            super().tokenize(mlm, truncate=truncate)
        for request in requests:
            tokenizer = self.static.get(route_of(request))
            if tokenizer is None:
                continue
            ids = tokenizer(request.text, add_special_tokens=False, verbose=False)["input_ids"]
            limit = tokenizer.model_max_length if tokenizer.model_max_length < 1_000_000_000 else len(ids)
            if len(ids) > limit and truncate is False:
                raise InputValueError(request.index, f"field 'text' has {len(ids)} tokens, more than the "
                                 f"{route_of(request)!r} route's {limit}; shorten it or pass truncate=True")
            if not ids:
                raise InputValueError(request.index, f"field 'text' has no tokens for the {route_of(request)!r} "
                                 "route (an empty text): its sparse vector would be empty")
            request.token_ids = ids[:limit]
            request.token_type_ids = [0] * len(request.token_ids) if self.uses_token_types else None


@dataclass
class RoutedInput(ModelInput):
    """A packed batch plus ``routes``: per sequence, -1 for the MLM route, else its static route's index."""

    routes: torch.Tensor | None = None


class RoutedBatchBuilder(FlatBatchBuilder):
    """The core's flat batch, with each sequence's route index for a Router model."""

    def __init__(self, pipeline, attention_backend) -> None:
        super().__init__(pipeline, attention_backend)
        self.static_routes = list(pipeline.settings.extras["splade"]["static_routes"])

    def build(self, requests) -> ModelInput:
        """Pack ``requests``; :class:`RoutedInput` when the model has static routes."""
        batch = super().build(requests)
        if not self.static_routes:
            return batch
        routes = [self.static_routes.index(route_of(r)) if route_of(r) in self.static_routes else -1
                  for r in requests]
        return RoutedInput(**{f.name: getattr(batch, f.name) for f in fields(batch)},
                           routes=torch.tensor(routes, dtype=torch.int64))
