"""Calls the routes make: inputs validated and tokenized as each API asks, then run on the model's engine.

Every call is prepared on the engine's tokenizer thread (the event loop never tokenizes) and timed:
tokenization, queue and inference time, and the tokens it computed, for the response headers and
the metrics.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from wde_core.plugin_api import Call, EmbedOptions, Request, TokenEmbedOptions, collect_embeddings
from wde_server.errors import ApiError
from wde_server.images import engine_items, named
from wde_server.keys import retry_after
from wde_server.models import ServedModel

TRUNCATE = ("error", "end", "start")  # refuse an over-long input, cut its end, or cut its start


@dataclass
class Timing:
    """Where one HTTP request's time went, in seconds, and how many tokens it computed."""

    start: float = field(default_factory=time.perf_counter)
    tokenize: float = 0.0
    queue: float = 0.0
    inference: float = 0.0
    tokens: int = 0
    requests: int = 0

    def headers(self) -> dict[str, str]:
        """TEI's timing headers (milliseconds) and the token count."""
        total = time.perf_counter() - self.start
        return {"x-compute-tokens": str(self.tokens), "x-queue-time": _ms(self.queue),
                "x-inference-time": _ms(self.inference), "x-tokenization-time": _ms(self.tokenize),
                "x-total-time": _ms(total)}


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.3f}"


INLINE_CHARS = 2048  # a call this short is tokenized on the event loop: cheaper than a hop to the tokenizer thread


def is_small(inputs: Sequence[Any]) -> bool:
    """Whether a call's inputs are few and short enough to tokenize on the event loop (never images)."""
    return len(inputs) <= 4 and not any(isinstance(x, dict) for x in inputs) and sum(map(len, inputs)) <= INLINE_CHARS


@dataclass
class Limits:
    """What one request may cost, checked once it is tokenized and before it is queued."""

    max_tokens: int
    max_floats: int
    floats_per_token: int = 0  # /embed_all: the floats each token's vector adds to the response
    key: Any = None  # the request's ApiKey, with its token quota
    metrics: Any = None

    def check(self, tokens: int) -> None:
        """413 past ``--max-request-tokens`` or ``--max-output-floats``; 429 past the key's token quota."""
        self.check_size(tokens)
        if self.key is not None:
            self.charge(tokens)

    def check_size(self, tokens: int) -> None:
        """413 past ``--max-request-tokens`` or ``--max-output-floats``."""
        if tokens > self.max_tokens:
            raise ApiError(413, f"the request has {tokens} tokens, more than the limit of {self.max_tokens} tokens "
                                "a request (--max-request-tokens); split it")
        if self.floats_per_token and tokens * self.floats_per_token > self.max_floats:
            raise ApiError(413, f"the response would hold {tokens} tokens x {self.floats_per_token} floats, more "
                                f"than the limit of {self.max_floats} floats a request (--max-output-floats); "
                                "split the request")

    def charge(self, tokens: int) -> None:
        """Take ``tokens`` from the key's per-minute token quota (429 with ``Retry-After`` when short)."""
        quota = self.key.tokens_per_minute
        if quota is not None and tokens > quota:
            raise ApiError(429, f"the request has {tokens} tokens, more than key {self.key.name!r} may use in a "
                                f"minute ({quota}); split it")
        wait = self.key.wait("tokens_per_minute", tokens)
        if wait:
            raise ApiError(429, f"key {self.key.name!r} is over its quota of {quota} tokens a minute; retry after "
                                "the time in Retry-After", headers={"retry-after": retry_after(wait)})
        if self.metrics is not None:
            self.metrics.key_tokens.labels(self.key.name).inc(tokens)


def limits_for(request: Any, floats_per_token: int = 0) -> Limits:
    """The limits of ``request`` (a Starlette request): the server's options and the request's key."""
    options = request.app.state.options
    return Limits(options.max_request_tokens, options.max_output_floats, floats_per_token,
                  getattr(request.state, "key", None), request.app.state.metrics)


async def run(model: ServedModel, prepare: Callable[[], Call], timing: Timing, *, request: Any, inline: bool = False,
              floats_per_token: int = 0) -> Any:
    """Prepare on the tokenizer thread (``inline``: on the loop), check the request's limits, run batched
    with other callers (fairly, by API key name), collect; ``timing`` filled in. Bad input
    (``ValueError``/``TypeError`` while preparing) becomes a 400 naming it. If the client disconnects or the
    request's deadline passes first, the work is dropped (499 or 504)."""
    limits = limits_for(request, floats_per_token)
    tenant = limits.key.name if limits.key is not None else None
    submitted = asyncio.ensure_future(model.engine.submit(lambda: _timed(prepare, timing, limits), inline=inline,
                                                          tenant=tenant))
    try:
        return await until_answered(submitted, request)
    except RuntimeError as exc:
        if model.alive():
            raise
        raise ApiError(503, f"model {model.name!r} cannot serve: {exc}", code="model_unavailable") from None


async def until_answered(submitted: asyncio.Future, request: Any) -> Any:
    """``submitted``'s result, unless the client goes away (499) or the deadline passes (504) first: then
    ``submitted`` is cancelled, which drops its queued work and discards its share of batches in flight."""
    deadline = getattr(request.state, "deadline", None)
    gone = asyncio.ensure_future(request.receive())  # answers only when the client disconnects
    timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
    try:
        done, _ = await asyncio.wait({submitted, gone}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
    if submitted in done:
        return submitted.result()
    submitted.cancel()
    if gone in done:
        raise ApiError(499, "the client closed the connection; the request's work was dropped")
    raise ApiError(504, "the request's deadline passed (X-Request-Timeout or --request-timeout); its work was "
                        "dropped", code="deadline_exceeded")


def _timed(prepare: Callable[[], Call], timing: Timing, limits: Limits) -> Call:
    began = time.perf_counter()
    try:
        call = prepare()
    except ApiError:
        raise
    except (ValueError, TypeError) as exc:
        raise ApiError(422 if "max_model_len" in str(exc) else 400, str(exc)) from None
    prepared = time.perf_counter()
    timing.tokenize = prepared - began
    timing.tokens = sum(r.num_tokens for r in call.requests)
    timing.requests = len(call.requests)
    limits.check(timing.tokens)
    requests = call.requests

    def collect(results: list[Any]) -> Any:
        done = time.perf_counter()
        scheduled = min((r.scheduled_at for r in requests if r.scheduled_at is not None), default=prepared)
        timing.queue, timing.inference = max(0.0, scheduled - prepared), max(0.0, done - scheduled)
        return call.collect(results)

    return Call(requests, collect)


def embed_call(model: ServedModel, inputs: Sequence[Any], *, truncate: str, field_name: str,
               options: EmbedOptions, prompt_name: str | None = None, output: str | tuple[str, ...] = "dense",
               where: Sequence[str] | None = None, max_pixels: int | None = None) -> Callable[[], Call]:
    """A prepare function embedding texts, token-id lists or (``where``: the request field of each input)
    texts and images (``max_pixels`` in all), with an explicit truncation policy; an input the engine refuses
    is named by ``where``."""
    def prepare() -> Call:
        try:
            items = inputs if where is None else engine_items(inputs, where, max_pixels)
            requests = _requests(model, items, truncate, field_name, options, prompt_name)
        except (ValueError, TypeError) as exc:
            if where is None:
                raise
            raise named(exc, where) from None
        return Call(requests, lambda results: collect_embeddings(results, output, single=False))

    return prepare


def token_embed_call(model: ServedModel, texts: Sequence[str], *, truncate: str, field_name: str,
                     normalize: bool, prompt_name: str | None = None) -> Callable[[], Call]:
    """A prepare function for every token's vector (``/embed_all``)."""
    def prepare() -> Call:
        options = TokenEmbedOptions(normalize=normalize)
        return Call(_requests(model, texts, truncate, field_name, options, prompt_name), lambda results: results)

    return prepare


def _requests(model: ServedModel, inputs: Sequence[Any], truncate: str, field_name: str, options: Any,
              prompt_name: str | None) -> list[Request]:
    if inputs and isinstance(inputs[0], (list, tuple)):
        if prompt_name is not None:  # a prompt (or a sparse Router's route) applies to texts: never drop it silently
            raise ApiError(400, f"prompt_name: {prompt_name!r} applies to texts; {field_name} are token ids, used "
                                "as given (send the texts instead)", param="prompt_name")
        requests = token_requests(model, inputs, options, field_name)
    else:
        requests = model.sync.input_processor.process(list(inputs), prompt_name=prompt_name, options=options)
        if not model.cuts_tokens:  # an image-text model's tokenizer cuts a text's end, or refuses it
            model.sync.tokenizer.tokenize(requests, truncate=engine_truncation(model, truncate))
            return requests
        model.sync.tokenizer.tokenize(requests, truncate="chunk")  # whole: cut or refused below
    fit_length(model, requests, truncate, field_name)
    return requests


def engine_truncation(model: ServedModel, truncate: str) -> bool:
    """The policy as the engine's ``truncate`` (cut the end, or refuse); cutting the start is refused (400)."""
    if truncate == "start":
        raise ApiError(400, f"truncate: model {model.name!r} cuts a long text at its end only; ask to cut the end, "
                            "or send shorter texts", param="truncate")
    return truncate == "end"


def token_requests(model: ServedModel, token_lists: Sequence[Sequence[int]], options: Any,
                   field_name: str) -> list[Request]:
    """Requests from token ids given by the client (used as given: no special tokens are added)."""
    vocab = len(model.hf_tokenizer)
    with_types = model.sync.tokenizer.uses_token_types
    model.sync.input_processor.check_options(options)
    requests = []
    for i, ids in enumerate(token_lists):
        bad = next((t for t in ids if not 0 <= t < vocab), None)
        if bad is not None:
            raise ApiError(400, f"{field_name}[{i}]: token id {bad} is outside the vocabulary (0..{vocab - 1})",
                           param=field_name)
        requests.append(Request(i, None, options, token_ids=list(ids),
                                token_type_ids=[0] * len(ids) if with_types else None))
    return requests


def fit_length(model: ServedModel, requests: list[Request], truncate: str, field_name: str) -> None:
    """Refuse (422) or cut every request longer than the model's limit, keeping the special tokens."""
    limit = model.max_model_len
    for request in requests:
        excess = request.num_tokens - limit
        if excess <= 0 or getattr(request, "image", None) is not None:  # an image's tokens are the model's own
            continue
        if truncate == "error":
            raise ApiError(422, f"{field_name}[{request.index}] has {request.num_tokens} tokens, more than the "
                                f"model's limit of {limit}; shorten it or ask for truncation", param=field_name)
        cut_tokens(model, request, excess, from_start=truncate == "start")


def cut_tokens(model: ServedModel, request: Request, excess: int, *, from_start: bool) -> None:
    """Drop ``excess`` tokens at the start or the end of the text, keeping the special tokens around it."""
    prefix, suffix = model.sync.tokenizer.special_affixes() if request.text is not None else ([], [])
    n = request.num_tokens
    body = range(len(prefix), n - len(suffix))
    keep = list(range(len(prefix))) + [i for i in body if (i >= body.start + excess if from_start
                                                           else i < body.stop - excess)]
    keep += list(range(n - len(suffix), n))
    request.token_ids = [request.token_ids[i] for i in keep]
    if request.token_type_ids is not None:
        request.token_type_ids = [request.token_type_ids[i] for i in keep]
    if from_start and request.prompt_len:
        request.prompt_len = max(len(prefix), request.prompt_len - excess)


def score_call(model: ServedModel, pairs: Sequence[tuple[str, str]], *, truncate: bool,
               raw_scores: bool = False) -> Callable[[], Call]:
    """A prepare function scoring ``(query, document)`` pairs with the model's cross-encoder."""
    return lambda: model.sync.prepare("score", list(pairs), raw_scores=raw_scores, truncate=truncate)


def classify_call(model: ServedModel, inputs: Sequence[Any], *, truncate: bool,
                  raw_scores: bool = False) -> Callable[[], Call]:
    """A prepare function classifying texts or text pairs: ``{label: p}`` per input."""
    return lambda: model.sync.prepare("classify", list(inputs), raw_scores=raw_scores, truncate=truncate)
