"""The engine: built once from a resolved pipeline, then a loop of plain method calls per batch; its
front-end methods run the task table's prepare functions (``wde_register_tasks``)."""

from __future__ import annotations

import sys
import time
from collections import deque
from typing import Any, Callable, Iterable, Iterator

import torch

from wde_core.plugins.entries import Task, import_target
from wde_core.assembly.pipeline import Pipeline, assemble_pipeline
from wde_core.runtime.front_end import TaskMethods
from wde_core.stages.request import Request
from wde_core.runtime.stream import map_chunks
from wde_core.stages.worker import worker_factory
from wde_core.tasks import SHOW_PROGRESS, Call, TaskContext, describe_methods, front_end_method


class Engine(TaskMethods):
    """Serve one model: ``Engine(model, **engine_args).encode(texts)`` (or any method of the model's tasks).

    Every component is built here, once; the per-batch path calls no hooks. Every front-end method also
    takes ``show_progress=True`` to draw a progress bar on stderr."""

    def __init__(self, model: str | None = None, **engine_args: Any) -> None:
        self.pipeline = assemble_pipeline(model, **engine_args)
        self._build(self.pipeline)

    def _build(self, p: Pipeline) -> None:
        if p.args.num_threads:
            torch.set_num_threads(p.args.num_threads)
        elif p.device.type == "cuda":  # its CPU work is copies and bookkeeping: an OpenMP team spinning on every
            torch.set_num_threads(1)  # core took them from the tokenizer (H200, 50-token map: 1.21M -> 1.54M tokens/s)
        make = {stage: component.load() for stage, component in p.components.items()}
        self.attention = make["attention_backend"](p)
        self.input_processor = make["input_processor"](p)
        self.tokenizer = make["tokenizer"](p)
        self.scheduler = make["scheduler"](p)
        self.builder = make["model_input_builder"](p, self.attention)
        self.output_processor = make["output_processor"](p)
        self.context = TaskContext(p, self.input_processor, self.tokenizer, self.output_processor)
        self.executor = make["executor"](p, worker_factory(p, self.attention))
        self._in_flight: deque = deque()
        self._owner: str | None = None
        self.batch_listeners: list[Callable[[list[Request]], None]] = []
        self._prepares: dict[str, Callable] = {}
        p.host.hook.wde_on_pipeline_assembled(pipeline=p)
        if p.device.type == "cuda":
            _freeze_startup_heap()

    @property
    def task(self) -> str:
        """The task this engine's model is linked for (``embed``, ``rerank``, ...)."""
        return self.pipeline.task

    # -- front ends of plugins' tasks, made from the task table ------------------------------------
    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or "pipeline" not in self.__dict__:
            raise AttributeError(name)
        prepare = self.front_end(name)  # AttributeError for a name no task serves
        return front_end_method(name, prepare, extra=(SHOW_PROGRESS,)).__get__(self)

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | set(self.methods()))

    def methods(self) -> list[str]:
        """Every front-end method the task table defines (those of other tasks refuse this model)."""
        return [m for task in self.pipeline.host.registry.tasks.values() for m in task.methods]

    def front_end(self, method: str) -> Callable:
        """The prepare function behind ``method``; ``AttributeError`` when no task has it."""
        if method not in self._prepares:
            task = self._task_of(method)
            self._prepares[method] = import_target(task.methods[method])
        return self._prepares[method]

    def prepare(self, method: str, *args: Any, **kwargs: Any) -> Call:
        """Validate and tokenize a front-end call (``TypeError`` for a task this model does not serve);
        raises before any batch runs."""
        if self.__dict__.get("closed"):
            raise RuntimeError(f"this engine ({self.pipeline.model.name!r}) is closed; build a new Engine")
        task = self._task_of(method)
        if self.task not in task.link_tasks:
            registry = self.pipeline.host.registry
            raise TypeError(f"{method}() serves the {task.name!r} task, but model {self.pipeline.model.name!r} is "
                            f"served for the {self.task!r} task; use {describe_methods(registry, self.task)}")
        return self.front_end(method)(self.context, *args, **kwargs)

    def call(self, method: str, *args: Any, show_progress: bool = False, **kwargs: Any) -> Any:
        """Run a front-end method by name: prepare, run its requests, collect the results."""
        prepared = self.prepare(method, *args, **kwargs)
        return prepared.collect(self.run(prepared.requests, show_progress=show_progress))

    def map(self, method: str, chunks: Iterable[Any], *, prefetch: int = 2, errors: str = "raise",
            **kwargs: Any) -> Iterator[Any]:
        """``method`` (``"encode"``, ``"rerank"``, ...) over an iterable of inputs, one call per item, yielded in
        order: the next items are validated and tokenized on a tokenizer thread while the engine runs the batches
        of the current ones (the pipelined host path; :mod:`wde_core.runtime.stream`). ``errors="return"`` yields
        a refused item's error in its place instead of raising it."""
        return map_chunks(self, method, chunks, prefetch=prefetch, errors=errors, **kwargs)

    def _task_of(self, method: str) -> Task:
        task = self.pipeline.host.registry.method_owner(method)
        if task is None:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {method!r} (no registered "
                                 f"task has a method of that name; methods: {', '.join(self.methods())})")
        return task

    # -- the loop -----------------------------------------------------------------------------------
    def run(self, requests: list[Request], *, show_progress: bool = False) -> list[Any]:
        """Schedule tokenized requests and return their outputs in input order."""
        import click

        if self._owner is not None:
            raise RuntimeError(f"this engine is serving {self._owner}; finish or close it before another call")
        results: list[Any] = [None] * len(requests)
        self.scheduler.add(requests)
        try:
            with click.progressbar(length=len(requests), label="encoding", file=sys.stderr,
                                   hidden=not (show_progress and requests)) as bar:
                while self.has_unfinished():
                    finished = self.step()
                    for request, output in finished:
                        results[request.index] = output
                    bar.update(len(finished))
        except BaseException:
            self.abort()
            raise
        return results

    def claim(self, owner: str | None) -> None:
        """Reserve the engine's scheduler for ``owner`` (a stream whose requests wait in it between two of its
        yields), or release it (``None``); other calls raise ``RuntimeError`` meanwhile."""
        if owner is not None and self._owner is not None:
            raise RuntimeError(f"this engine is serving {self._owner}; finish or close it before {owner}")
        self._owner = owner

    def has_unfinished(self) -> bool:
        """Whether requests wait in the scheduler or batches are in flight."""
        return self.scheduler.has_waiting() or bool(self._in_flight)

    def step(self) -> list[tuple[Request, Any]]:
        """Submit batches up to the executor's limit, then finish the oldest: its (request, output) pairs
        (a failed batch raises :class:`BatchError`)."""
        while len(self._in_flight) < self.executor.max_in_flight and self.scheduler.has_waiting():
            batch = self.scheduler.schedule()
            self._formed(batch)
            self._in_flight.append((batch, self.executor.submit(self.builder.build(batch))))
        if not self._in_flight:
            return []
        batch, future = self._in_flight.popleft()
        try:
            outputs = self.output_processor.process(batch, future.result())
        except Exception as exc:
            raise BatchError(batch, exc) from exc
        return list(zip(batch, outputs))

    def _formed(self, batch: list[Request]) -> None:
        now = time.perf_counter()
        for request in batch:
            request.scheduled_at = now
        for listener in self.batch_listeners:
            listener(batch)

    def abort(self) -> None:
        """Drop waiting requests and wait out the batches in flight (after a failure)."""
        self.scheduler.clear()
        while self._in_flight:
            _, future = self._in_flight.popleft()
            future.exception()

    def close(self) -> None:
        """Release the executor and its workers; later calls raise ``RuntimeError``."""
        self.closed = True
        self.executor.shutdown()

    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class BatchError(RuntimeError):
    """A batch failed in the executor; ``requests`` are the requests it carried."""

    def __init__(self, requests: list[Request], cause: BaseException) -> None:
        super().__init__(f"a batch of {len(requests)} request(s) failed: {cause}")
        self.requests = requests
        self.cause = cause


def _freeze_startup_heap() -> None:
    """Move every object alive now (modules, the model, the tokenizer: some 400k) out of the cyclic garbage collector's
    reach. A GPU engine's host path makes requests and token lists so fast that full collections, each walking the
    whole startup heap with the GIL held, took 10-30% of it (vLLM freezes its startup heap too)."""
    import gc

    gc.collect()
    gc.freeze()
