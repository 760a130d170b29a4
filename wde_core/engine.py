"""The engine: built once from a resolved pipeline, then a loop of plain method calls per batch."""

from __future__ import annotations

import sys
from collections import deque
from typing import Any, Sequence

import numpy as np
import torch

from wde_core.pipeline import Pipeline, assemble_pipeline
from wde_core.request import EmbedOptions, Request


class Engine:
    """Serve one model: ``Engine(model, **engine_args).encode(texts)``.

    The pipeline (workflow, components, settings) is resolved and every component built here,
    once; the per-batch path (schedule, build input, execute, process output) calls no hooks.
    """

    def __init__(self, model: str | None = None, **engine_args: Any) -> None:
        self.pipeline = assemble_pipeline(model, **engine_args)
        self._build(self.pipeline)

    @classmethod
    def from_pipeline(cls, pipeline: Pipeline) -> "Engine":
        """Build an engine from an already resolved :class:`Pipeline`."""
        engine = cls.__new__(cls)
        engine.pipeline = pipeline
        engine._build(pipeline)
        return engine

    def _build(self, p: Pipeline) -> None:
        if p.args.num_threads:
            torch.set_num_threads(p.args.num_threads)
        make = {stage: component.load() for stage, component in p.components.items()}
        self.attention = make["attention_backend"](p)
        self.input_processor = make["input_processor"](p)
        self.tokenizer = make["tokenizer"](p)
        self.scheduler = make["scheduler"](p)
        self.builder = make["model_input_builder"](p, self.attention)
        self.output_processor = make["output_processor"](p)
        self.executor = make["executor"](p, lambda: make["worker"](p, self.attention, self.output_processor))
        p.host.hook.wde_on_pipeline_assembled(pipeline=p)

    @property
    def task(self) -> str:
        """The task this engine serves."""
        return self.pipeline.task

    def encode(self, texts: str | Sequence[str], *, normalize: bool | None = None, dimensions: int | None = None,
               prompt: str | None = None, prompt_name: str | None = None, truncate: bool = True,
               show_progress: bool = False) -> np.ndarray:
        """Embed ``texts``: a float32 array ``[n, dim]``, or ``[dim]`` for a single string.

        ``normalize`` and ``dimensions`` override the model's settings (Matryoshka truncation,
        then renormalization); ``prompt``/``prompt_name`` prepend an instruction; with
        ``truncate=False`` an input longer than ``max_model_len`` raises ``ValueError``.
        """
        self._require_task("embed", "encode")
        options = EmbedOptions(normalize=normalize, dimensions=dimensions)
        requests = self.input_processor.process(texts, prompt=prompt, prompt_name=prompt_name, options=options)
        self.tokenizer.tokenize(requests, truncate=truncate)
        outputs = self.run(requests, show_progress=show_progress)
        stacked = np.stack(outputs).astype(np.float32, copy=False)
        return stacked[0] if isinstance(texts, str) else stacked

    def run(self, requests: list[Request], *, show_progress: bool = False) -> list[Any]:
        """Schedule tokenized requests and return their outputs in input order."""
        results: list[Any] = [None] * len(requests)
        self.scheduler.add(requests)
        in_flight: deque = deque()
        try:
            with _progress(show_progress, len(requests)) as bar:
                while self.scheduler.has_waiting() or in_flight:
                    while len(in_flight) < self.executor.max_in_flight and self.scheduler.has_waiting():
                        batch = self.scheduler.schedule()
                        in_flight.append((batch, self.executor.submit(self.builder.build(batch))))
                    batch, future = in_flight.popleft()
                    for request, output in zip(batch, self.output_processor.process(batch, future.result())):
                        results[request.index] = output
                    bar.update(len(batch))
        finally:
            self.scheduler.clear()
        return results

    def _require_task(self, task: str, method: str) -> None:
        if self.task != task:
            raise TypeError(f"{method}() serves the {task!r} task, but model {self.pipeline.model.name!r} "
                            f"is served for the {self.task!r} task")

    def close(self) -> None:
        """Release the executor and its workers."""
        self.executor.shutdown()

    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class _NoProgress:
    def update(self, n: int) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _progress(enabled: bool, total: int):
    if not enabled:
        return _NoProgress()
    import click

    return click.progressbar(length=total, label="encoding", file=sys.stderr)
