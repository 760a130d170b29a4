"""The engine: built once from a resolved pipeline, then a loop of plain method calls per batch."""

from __future__ import annotations

import sys
from collections import deque
from typing import Any, Sequence

import torch

from wde_core.outputs import DENSE, check_outputs, collect_embeddings, parse_output
from wde_core.pipeline import Pipeline, assemble_pipeline
from wde_core.request import EmbedOptions, Request
from wde_core.scoring_api import ScoringTasks


class Engine(ScoringTasks):
    """Serve one model: ``Engine(model, **engine_args).encode(texts)`` (or ``score``/``rerank``/``classify``).

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
        self._in_flight: deque = deque()
        p.host.hook.wde_on_pipeline_assembled(pipeline=p)

    @property
    def task(self) -> str:
        """The task this engine serves."""
        return self.pipeline.task

    def encode(self, texts: str | Sequence[str], *, normalize: bool | None = None, dimensions: int | None = None,
               prompt: str | None = None, prompt_name: str | None = None, truncate: bool = True,
               output: str | Sequence[str] = "dense", show_progress: bool = False) -> Any:
        """Embed ``texts``: a float32 array ``[n, dim]``, or ``[dim]`` for a single string.

        ``normalize`` and ``dimensions`` override the model's settings (Matryoshka truncation,
        then renormalization); ``prompt``/``prompt_name`` prepend an instruction; with
        ``truncate=False`` an input longer than ``max_model_len`` raises ``ValueError``.
        ``output`` names what to return where the model serves more than the dense vector
        (bge-m3: ``"sparse"``, ``"colbert"``); a tuple of names returns a dict keyed by them.
        """
        requests = self.prepare_embed(texts, normalize=normalize, dimensions=dimensions, prompt=prompt,
                                      prompt_name=prompt_name, truncate=truncate, output=output)
        results = self.run(requests, show_progress=show_progress)
        return collect_embeddings(results, output, single=isinstance(texts, str))

    def prepare_embed(self, texts, *, normalize=None, dimensions=None, prompt=None, prompt_name=None,
                      truncate=True, output="dense") -> list[Request]:
        """Validate and tokenize an ``encode`` call's inputs; raises before any batch runs."""
        self._require_task("embed", "encode")
        names, _ = parse_output(output)
        check_outputs(names, getattr(self.output_processor, "outputs", (DENSE,)), self.pipeline.model.name)
        options = EmbedOptions(normalize=normalize, dimensions=dimensions, output=names)
        requests = self.input_processor.process(texts, prompt=prompt, prompt_name=prompt_name, options=options)
        self.tokenizer.tokenize(requests, truncate=truncate)
        return requests

    def run(self, requests: list[Request], *, show_progress: bool = False) -> list[Any]:
        """Schedule tokenized requests and return their outputs in input order."""
        results: list[Any] = [None] * len(requests)
        self.scheduler.add(requests)
        try:
            with _progress(show_progress, len(requests)) as bar:
                while self.has_unfinished():
                    finished = self.step()
                    for request, output in finished:
                        results[request.index] = output
                    bar.update(len(finished))
        except BaseException:
            self.abort()
            raise
        return results

    def has_unfinished(self) -> bool:
        """Whether requests wait in the scheduler or batches are in flight."""
        return self.scheduler.has_waiting() or bool(self._in_flight)

    def step(self) -> list[tuple[Request, Any]]:
        """Submit batches up to the executor's limit, then finish the oldest: its (request, output) pairs.

        A failed batch raises :class:`BatchError` carrying the batch's requests.
        """
        while len(self._in_flight) < self.executor.max_in_flight and self.scheduler.has_waiting():
            batch = self.scheduler.schedule()
            self._in_flight.append((batch, self.executor.submit(self.builder.build(batch))))
        if not self._in_flight:
            return []
        batch, future = self._in_flight.popleft()
        try:
            outputs = self.output_processor.process(batch, future.result())
        except Exception as exc:
            raise BatchError(batch, exc) from exc
        return list(zip(batch, outputs))

    def abort(self) -> None:
        """Drop waiting requests and wait out the batches in flight (after a failure)."""
        self.scheduler.clear()
        while self._in_flight:
            _, future = self._in_flight.popleft()
            future.exception()

    def _require_task(self, task: str, method: str) -> None:
        if self.task != task:
            methods = {"embed": "encode()", "rerank": "score() and rerank()", "classify": "classify()"}
            use = f"; use {methods[self.task]}" if self.task in methods else ""
            raise TypeError(f"{method}() serves the {task!r} task, but model {self.pipeline.model.name!r} "
                            f"is served for the {self.task!r} task{use}")

    def close(self) -> None:
        """Release the executor and its workers."""
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
