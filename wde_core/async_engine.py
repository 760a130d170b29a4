"""``AsyncEngine``: many concurrent asyncio callers, one engine thread that batches them together.

Each call is prepared on a tokenizer thread (bad input fails that call alone, before any work), then
queued; the engine thread runs the batches and resolves each call's future when its last request is done.
"""

from __future__ import annotations

import asyncio
import itertools
import queue
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Callable

from wde_core.engine import BatchError, Engine
from wde_core.tasks import Call, front_end_method


@dataclass
class _Call:
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future
    collect: Callable[[list], Any]
    results: list[Any] = field(default_factory=list)
    remaining: int = 0
    failed: bool = False


class AsyncEngine:
    """``await AsyncEngine(model, **engine_args).encode(texts)`` from any number of asyncio tasks: the
    front-end methods of :class:`Engine` as coroutines; a failed batch fails only the calls it served."""

    def __init__(self, model: str | None = None, **engine_args: Any) -> None:
        self.engine = Engine(model, **engine_args)
        self._submissions: queue.Queue = queue.Queue()
        self._ids = itertools.count()
        self._calls: dict[int, _Call] = {}
        self._closed = False
        self._engine_lock = threading.Lock()  # held by whoever drives the engine: its thread, or a lone call
        self._active = 0  # calls between submit() and their result (approximate across several event loops)
        self._tokenizer_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="wde-tokenizer")
        self._thread = threading.Thread(target=self._loop, name="wde-engine", daemon=True)
        self._thread.start()

    @property
    def pipeline(self):
        """The resolved pipeline of the underlying engine."""
        return self.engine.pipeline

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or "engine" not in self.__dict__:
            raise AttributeError(name)
        prepare = self.engine.front_end(name)  # AttributeError for a name no task serves
        return front_end_method(name, prepare, self.call, is_async=True)

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | set(self.engine.methods()))

    async def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """Run a front-end method by name: prepared on the tokenizer thread, batched with other callers."""
        return await self.submit(partial(self.engine.prepare, method, *args, **kwargs))

    async def submit(self, prepare: Callable[[], Call], *, inline: bool = False) -> Any:
        """Run ``prepare()`` on the tokenizer thread (on the event loop itself when ``inline``: cheaper for a
        few short texts), queue its requests with other callers', and await its collected results. An ``inline``
        call that is the only one in flight, with the engine idle, runs on the event loop (a lone request's latency).
        """
        if self._closed or not self._thread.is_alive():
            raise RuntimeError("AsyncEngine is closed" if self._closed else "the engine loop has stopped")
        self._active += 1
        try:
            return await self._submit(prepare, inline)
        finally:
            self._active -= 1

    async def _submit(self, prepare: Callable[[], Call], inline: bool) -> Any:
        loop = asyncio.get_running_loop()
        if inline:
            await asyncio.sleep(0)  # callers that arrived together register first, so they batch together
        prepared = prepare() if inline else await loop.run_in_executor(self._tokenizer_thread, prepare)
        requests = prepared.requests
        if not requests:
            return prepared.collect([])
        if inline and self._active == 1 and self._engine_lock.acquire(blocking=False):
            try:  # the only call, and the engine idle: run it here, without the hop to the engine thread and back
                if self._submissions.empty() and not self.engine.has_unfinished():
                    return prepared.collect(self._run_alone(requests))
            finally:
                self._engine_lock.release()
        call = _Call(loop, loop.create_future(), prepared.collect, [None] * len(requests), len(requests))
        call_id = next(self._ids)
        for request in requests:
            request.call_id = call_id
        self._submissions.put((call_id, call, requests))
        return await call.future

    def _run_alone(self, requests: list) -> list:
        """Run one call's requests on the calling thread (the engine is idle and locked); a failed batch
        raises its cause, as a queued call's does."""
        try:
            return self.engine.run(requests)
        except BatchError as exc:
            raise exc.cause from None

    def _loop(self) -> None:
        engine, stopping = self.engine, False
        while True:
            items = list(self._drain(block=not stopping and not engine.has_unfinished()))
            with self._engine_lock:
                for item in items:
                    if item is None:
                        stopping = True
                        continue
                    call_id, call, requests = item
                    self._calls[call_id] = call
                    try:
                        engine.scheduler.add(requests)
                    except Exception as exc:  # noqa: BLE001 - e.g. a request over the token budget: that call fails
                        self._fail(call_id, exc)
                if engine.has_unfinished():
                    try:
                        self._run_one_step()
                    except Exception as exc:  # noqa: BLE001 - never leave callers waiting on a dead loop
                        engine.abort()
                        for call_id in list(self._calls):
                            self._fail(call_id, exc)
                elif stopping:
                    return

    def _drain(self, *, block: bool):
        """Yield queued submissions: wait for the first one only when ``block``."""
        try:
            yield self._submissions.get(block=block)
            while True:
                yield self._submissions.get_nowait()
        except queue.Empty:
            return

    def _run_one_step(self) -> None:
        try:
            finished = self.engine.step()
        except BatchError as exc:
            for request in exc.requests:
                self._fail(request.call_id, exc.cause)
            return
        for request, output in finished:
            call = self._calls.get(request.call_id)
            if call is None or call.failed:
                continue
            call.results[request.index] = output
            call.remaining -= 1
            if call.remaining == 0:
                del self._calls[request.call_id]
                result = call.collect(call.results)
                call.loop.call_soon_threadsafe(_resolve, call.future, result, None)

    def _fail(self, call_id: int, error: BaseException) -> None:
        call = self._calls.pop(call_id, None)
        if call is not None and not call.failed:
            call.failed = True
            call.loop.call_soon_threadsafe(_resolve, call.future, None, error)

    def is_alive(self) -> bool:
        """Whether the engine thread still runs (it stops only after :meth:`close`)."""
        return self._thread.is_alive()

    async def close(self) -> None:
        """Finish queued work, stop the engine thread and release the executor."""
        self._closed = True
        self._submissions.put(None)
        await asyncio.get_running_loop().run_in_executor(None, self._thread.join)
        self._tokenizer_thread.shutdown(wait=True)
        self.engine.close()


def _resolve(future: asyncio.Future, result: Any, error: BaseException | None) -> None:
    if future.done():
        return
    if error is None:
        future.set_result(result)
    else:
        future.set_exception(error)
