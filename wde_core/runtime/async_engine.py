"""``AsyncEngine``: many concurrent asyncio callers, one engine thread that batches them together.

Each call is prepared on a tokenizer thread (bad input fails that call alone, before any work), then
queued; the engine thread runs the batches and resolves each call's future when its last request is done.
A caller cancelled while it waits cancels its call: its queued requests are dropped, its outputs discarded.
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

from wde_core.runtime.engine import BatchError, Engine
from wde_core.runtime.front_end import TaskMethods
from wde_core.tasks import Call, front_end_method


@dataclass
class _Call:
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future
    collect: Callable[[list], Any]
    results: list[Any] = field(default_factory=list)
    remaining: int = 0
    failed: bool = False


class AsyncEngine(TaskMethods):
    """``await AsyncEngine(model, **engine_args).encode(texts)`` from any number of asyncio tasks: the
    front-end methods of :class:`Engine` as coroutines; a failed batch fails only the calls it served."""

    def __init__(self, model: str | None = None, **engine_args: Any) -> None:
        self._submissions: queue.Queue = queue.Queue()
        self._ids = itertools.count()
        self._calls: dict[int, _Call] = {}
        self._closed = False
        self.cancelled_requests = 0  # requests of cancelled calls dropped before they were computed
        self._tokenizer_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="wde-tokenizer")
        built: queue.Queue = queue.Queue()
        self._thread = threading.Thread(target=self._build_and_loop, args=(model, engine_args, built),
                                        name="wde-engine", daemon=True)
        self._thread.start()
        error = built.get()
        if error is not None:
            self._tokenizer_thread.shutdown(wait=False)
            raise error

    def _build_and_loop(self, model: str | None, engine_args: dict, built: queue.Queue) -> None:
        """Build the engine on this thread, then run its loop here: the model's every forward (its warm-up
        included) runs on this one thread. A second thread running torch ops would start a second OpenMP
        team, and with more team threads than cores libgomp stops spinning between parallel regions, which
        made a lone short request 40-70% slower here."""
        try:
            self.engine = Engine(model, **engine_args)
        except BaseException as exc:  # noqa: BLE001 - raised in the constructing thread
            built.put(exc)
            return
        built.put(None)
        self._loop()

    @property
    def pipeline(self):
        """The resolved pipeline of the underlying engine."""
        return self.engine.pipeline

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or "engine" not in self.__dict__:
            raise AttributeError(name)
        prepare = self.engine.front_end(name)  # AttributeError for a name no task serves
        return front_end_method(name, prepare, is_async=True).__get__(self)

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | set(self.engine.methods()))

    async def call(self, method: str, *args: Any, show_progress: bool = False, **kwargs: Any) -> Any:
        """Run a front-end method by name: prepared on the tokenizer thread, batched with other callers."""
        if show_progress:
            raise TypeError("show_progress=True: AsyncEngine batches calls together and draws no progress bar")
        return await self.submit(partial(self.engine.prepare, method, *args, **kwargs))

    async def submit(self, prepare: Callable[[], Call], *, inline: bool = False, tenant: str | None = None) -> Any:
        """Run ``prepare()`` on the tokenizer thread (on the event loop itself when ``inline``: cheaper for a
        few short texts), queue its requests with other callers', and await its collected results. The
        scheduler takes turns between tenants (``None``: every anonymous caller together), then between calls;
        cancelling the awaiting task cancels the call."""
        if self._closed or not self._thread.is_alive():
            raise RuntimeError("AsyncEngine is closed" if self._closed else "the engine loop has stopped")
        loop = asyncio.get_running_loop()
        prepared = prepare() if inline else await loop.run_in_executor(self._tokenizer_thread, prepare)
        requests = prepared.requests
        if not requests:
            return prepared.collect([])
        call = _Call(loop, loop.create_future(), prepared.collect, [None] * len(requests), len(requests))
        call_id = next(self._ids)
        for request in requests:
            request.call_id, request.tenant = call_id, tenant
        self._submissions.put((call_id, call, requests))
        # a cancelled caller (task.cancel(), a timeout) cancels the future it awaits: the engine drops the call
        call.future.add_done_callback(lambda f: f.cancelled() and self._submissions.put(("cancel", call_id)))
        return await call.future

    def _loop(self) -> None:
        engine, stopping = self.engine, False
        while True:
            for item in self._drain(block=not stopping and not engine.has_unfinished()):
                if item is None:
                    stopping = True
                    continue
                if item[0] == "cancel":
                    self._cancel(item[1])
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
                try:  # results that cannot be assembled fail their own call, not the engine
                    result, error = call.collect(call.results), None
                except Exception as exc:
                    result, error = None, exc
                call.loop.call_soon_threadsafe(_resolve, call.future, result, error)

    def _cancel(self, call_id: int) -> None:
        """Forget a cancelled call (outputs of its batches in flight are discarded) and drop its queued requests."""
        if self._calls.pop(call_id, None) is not None and hasattr(self.engine.scheduler, "drop"):
            self.cancelled_requests += self.engine.scheduler.drop(call_id)

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
