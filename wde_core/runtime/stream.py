"""The pipelined host path behind :meth:`Engine.map`: a front-end method over a stream of input chunks.

The next chunks are prepared (validated, tokenized: the tokenizer releases the GIL) on a tokenizer thread while
the engine runs the batches of the current ones, and a prepared chunk joins the scheduler as soon as it waits
for work, so batches stay full across chunk boundaries. The chunks' requests share one call in the scheduler:
first come, first served, so the chunks finish in order. Closing the stream (``close()``, a ``break``, an
exception in the consumer) drops what waits, waits out the batches in flight and stops the thread.
"""

from __future__ import annotations

from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator

from wde_core.stages.request import InputError

ERRORS = ("raise", "return")


class ChunkError(Exception):
    """An item of :meth:`Engine.map` was refused: ``index`` is its position in the stream, ``cause`` the error the
    method raised for it (which names the input and the field)."""

    def __init__(self, index: int, cause: BaseException) -> None:
        kind = type(cause)  # an InputError by the built-in class users catch it as (TypeError, ValueError)
        kind = next(c for c in kind.__mro__ if c.__module__ == "builtins") if isinstance(cause, InputError) else kind
        super().__init__(f"chunk {index}: {kind.__name__}: {cause}")
        self.index, self.cause = index, cause
        self.__cause__ = cause


@dataclass
class _Chunk:
    """One chunk's prepared call (or the error its preparation raised) and its results so far."""

    collect: Callable[[list], Any] | None = None
    results: list = field(default_factory=list)
    remaining: int = 0
    error: BaseException | None = None


def map_chunks(engine, method: str, chunks: Iterable[Any], *, prefetch: int = 2, errors: str = "raise",
               **kwargs: Any) -> Iterator[Any]:
    """Yield ``engine.<method>(chunk, **kwargs)`` for each chunk, in order, pipelined (see the module docstring).

    ``prefetch``: chunks prepared ahead of the engine. ``errors="raise"``: a chunk whose input is refused raises a
    :class:`ChunkError` naming the chunk (its cause names the input and the field) and ends the stream;
    ``"return"``: the ChunkError is yielded in that chunk's place and the stream goes on."""
    if errors not in ERRORS:
        raise ValueError(f"errors={errors!r}: expected 'raise' or 'return'")
    if not isinstance(prefetch, int) or isinstance(prefetch, bool) or prefetch < 1:
        raise ValueError(f"prefetch={prefetch!r}: expected a positive integer")
    engine.front_end(method)  # AttributeError for a method no task serves, before any chunk is read
    return _stream(engine, method, iter(chunks), prefetch, errors, kwargs)


def _stream(engine, method: str, source: Iterator, prefetch: int, errors: str, kwargs: dict) -> Iterator[Any]:
    engine.claim("a map() stream")  # its requests wait in the engine's scheduler between two of its yields
    stream = _Stream(engine, lambda chunk: engine.prepare(method, chunk, **kwargs), source, prefetch)
    try:
        stream.fill()
        while stream.preparing or stream.order:
            if stream.wants_chunk():
                stream.admit()
            elif engine.has_unfinished():
                stream.step()
            elif stream.order[0].error is None and stream.order[0].remaining:
                raise RuntimeError("Engine.map: requests of an unfinished chunk left the engine")
            while stream.order and (stream.order[0].error is not None or stream.order[0].remaining == 0):
                yield _finish(stream.order.popleft(), errors)
    finally:
        stream.close()
        engine.claim(None)


class _Stream:
    """The state of one :func:`map_chunks` stream: chunks being prepared, chunks in the engine, their requests."""

    def __init__(self, engine, prepare: Callable[[Any], Any], source: Iterator, prefetch: int) -> None:
        self.engine, self.prepare, self.source, self.prefetch = engine, prepare, source, prefetch
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="wde-tokenizer")
        self.preparing: deque[Future] = deque()
        self.order: deque[_Chunk] = deque()  # chunks handed to the engine, oldest first
        self.owner: dict[int, _Chunk] = {}  # id(request) -> its chunk
        self.admitted = self.queued_tokens = 0
        # enough queued to fill every batch in flight and the next: batches stay full across chunk boundaries,
        # and a consumer that stops reading holds a few batches' worth of requests, not the whole stream
        self.enough = (engine.executor.max_in_flight + 1) * engine.pipeline.args.max_num_batched_tokens

    def fill(self) -> None:
        """Submit chunks to the tokenizer thread until ``prefetch`` are being prepared or the source ends."""
        while len(self.preparing) < self.prefetch:
            chunk = next(self.source, _END)
            if chunk is _END:
                return
            self.preparing.append(self.pool.submit(self.prepare, chunk))

    def wants_chunk(self) -> bool:
        """Whether to admit the next prepared chunk now: the engine would idle without it, or it is ready and
        the engine holds less than :attr:`enough` tokens."""
        if not self.preparing:
            return False
        if not self.engine.has_unfinished():
            return True
        return self.preparing[0].done() and self.queued_tokens < self.enough

    def admit(self) -> None:
        """Queue the next prepared chunk's requests in the engine's scheduler (a refused chunk: its error)."""
        index, future = self.admitted, self.preparing.popleft()
        self.admitted += 1
        try:
            call = future.result()
            self.engine.scheduler.add(call.requests)
        except Exception as exc:  # noqa: BLE001 - this chunk's refusal, delivered in its place
            self.order.append(_Chunk(error=ChunkError(index, exc)))
        else:
            chunk = _Chunk(call.collect, [None] * len(call.requests), len(call.requests))
            self.order.append(chunk)
            self.owner.update((id(request), chunk) for request in call.requests)
            self.queued_tokens += sum(request.num_tokens for request in call.requests)
        self.fill()

    def step(self) -> None:
        """One engine step; its outputs go to their chunks."""
        for request, output in self.engine.step():
            chunk = self.owner.pop(id(request))
            chunk.results[request.index] = output
            chunk.remaining -= 1
            self.queued_tokens -= request.num_tokens

    def close(self) -> None:
        """Cancel what is being prepared, drop what waits in the engine, wait out its batches, stop the thread."""
        for future in self.preparing:
            future.cancel()
        self.engine.abort()
        self.pool.shutdown(wait=True, cancel_futures=True)


def _finish(chunk: _Chunk, errors: str) -> Any:
    """What the stream yields for a finished chunk: its collected result, or its error."""
    if chunk.error is None:
        return chunk.collect(chunk.results)
    if errors == "raise":
        raise chunk.error
    return chunk.error


_END = object()
