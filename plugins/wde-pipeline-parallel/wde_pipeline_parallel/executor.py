"""The pipeline-parallel executor: N stage processes in a chain joined by torch.distributed (gloo on CPU, NCCL on
CUDA with one device per process), each holding its share of the model's layers. The engine process keeps
scheduling and pre/post processing; each batch goes to every stage, the hidden states flow from stage to stage,
and the last stage returns the output. Up to 2N batches are in flight, so while stage 1 runs batch n, stage 0
runs batch n+1. A stage that dies (or raises, which leaves the chain out of step) fails the batches in flight
with :class:`StageDiedError` naming it, the other stages are stopped, and later batches are refused."""

from __future__ import annotations

import dataclasses
import logging
import multiprocessing
import os
import shutil
import tempfile
import threading
from concurrent.futures import Future
from multiprocessing.connection import wait
from typing import Any, Callable

from wde_core.plugin_api import ModelInput, child_engine_args
from wde_pipeline_parallel.layout import Layout, check_layout
from wde_pipeline_parallel.stage import stage_main

logger = logging.getLogger("wde")


class StageDiedError(RuntimeError):
    """A pipeline stage died or raised: the batches in flight failed and the executor takes no more work."""


@dataclasses.dataclass
class _Process:
    rank: int
    name: str
    stage: int
    process: Any
    conn: Any
    parameter_bytes: int = 0
    busy_seconds: float = 0.0


@dataclasses.dataclass
class _Job:
    future: Future
    waiting: int
    result: Any = None


class PipelineParallelExecutor:
    """``pipeline_parallel_size`` stage processes (times ``tensor_parallel_size`` ranks each); each with
    ``num_threads`` (default: the CPUs shared out) CPU threads, or one GPU; ``2 x stages`` batches in flight."""

    @staticmethod
    def check_pipeline(pipeline) -> None:
        """At assembly: refuse a model without cut points or with fewer layers than stages; give the split."""
        check_layout(pipeline)

    def __init__(self, pipeline, make_worker: Callable | None = None) -> None:
        self.layout = Layout.of(pipeline)
        self.max_in_flight = 2 * self.layout.stages
        self.failure: str | None = None
        self._closing = False
        self._lock = threading.Lock()
        self._reaping = threading.Lock()
        self._jobs: dict[int, _Job] = {}
        self._next_job = 0
        self._store = tempfile.mkdtemp(prefix="wde-pp-")
        ctx = multiprocessing.get_context("spawn")
        self.processes = [self._start(ctx, rank, pipeline) for rank in range(self.layout.processes)]
        starting = {p.conn: p for p in self.processes}
        while starting:  # any process first: the others may wait for a failed one in init_process_group
            for conn in wait(list(starting)):
                self._await_ready(starting.pop(conn))
        for process in self.processes:
            threading.Thread(target=self._read, args=(process,), daemon=True,
                             name=f"wde-pp-{process.name}-reader".replace(" ", "-")).start()

    def _start(self, ctx, rank: int, pipeline) -> _Process:
        layout = self.layout
        threads = pipeline.args.num_threads or max(1, (os.cpu_count() or 1) // layout.processes)
        args = child_engine_args(pipeline, rank, threads)
        dist = {"rank": rank, "stage": rank // layout.tp_size, "stages": layout.stages, "tp_size": layout.tp_size,
                "backend": layout.backend, "init_method": f"file://{os.path.join(self._store, 'store')}"}
        parent, child = ctx.Pipe()
        name = layout.name(rank)
        process = ctx.Process(target=stage_main, args=(child, str(pipeline.model.path), args, dist),
                              name=f"wde-pp-{name}".replace(" ", "-"), daemon=True)
        process.start()
        child.close()
        return _Process(rank, name, dist["stage"], process, parent)

    def _await_ready(self, process: _Process) -> None:
        try:
            status, detail = process.conn.recv()
        except EOFError:
            process.process.join(timeout=5)
            self._abort()
            raise StageDiedError(f"pipeline_parallel {process.name} exited while loading the model (exit code "
                                 f"{process.process.exitcode}); started from a script, pipeline_parallel needs the "
                                 "script's work under `if __name__ == \"__main__\":`") from None
        if status == "failed":
            self._abort()
            raise StageDiedError(f"pipeline_parallel {process.name} failed while loading the model:\n{detail}")
        process.parameter_bytes = detail["parameter_bytes"]

    @property
    def stages(self) -> list[_Process]:
        """The processes answering for each stage (tensor-parallel rank 0 of each)."""
        return [p for p in self.processes if p.rank % self.layout.tp_size == 0]

    def busy_seconds(self) -> list[float]:
        """Seconds each stage has spent computing so far (waiting for its neighbours not counted)."""
        return [p.busy_seconds for p in self.stages]

    def submit(self, model_input: ModelInput) -> Future:
        """Send ``model_input`` to every stage; the future holds the last stage's output once all answered."""
        future: Future = Future()
        with self._lock:  # one order of batches on every stage: their transfers must match
            if self.failure is not None:
                future.set_exception(StageDiedError(f"the pipeline_parallel executor takes no more work: "
                                                    f"{self.failure}; build a new Engine"))
                return future
            job_id, self._next_job = self._next_job, self._next_job + 1
            self._jobs[job_id] = _Job(future, len(self.processes))
            try:
                for process in self.processes:
                    process.conn.send((job_id, model_input))
            except (OSError, ValueError):
                pass  # the reader of the process that died reports it
        return future

    def _read(self, process: _Process) -> None:
        while True:
            try:
                job_id, ok, payload, busy = process.conn.recv()
            except (EOFError, OSError):
                if self._closing or self.failure is not None:
                    return  # stopped by us: whoever stopped it reaps it (two threads reaping one child race)
                self._break(self._reap(process))  # the pipe closed: the process is gone or going
                return
            if not ok:  # its neighbours wait for its hidden states: the chain is out of step
                self._break(self._dead_peer(process) or f"{process.name} raised {payload}")
                continue
            self._answered(process, job_id, payload, busy)  # payload: the last stage's output, else None

    def _answered(self, process: _Process, job_id: int, payload: Any, busy: float) -> None:
        with self._lock:
            process.busy_seconds += busy
            job = self._jobs.get(job_id)
            if job is None:
                return
            job.waiting -= 1
            job.result = payload if payload is not None else job.result
            if job.waiting:
                return
            del self._jobs[job_id]
        job.future.set_result(job.result)

    def _dead_peer(self, raised: _Process, grace: float = 1.0) -> str | None:
        """A peer that died: the cause when a process raised a transfer error because that peer was gone."""
        peers = {p.process.sentinel: p for p in self.processes if p is not raised}
        ended = wait(list(peers), timeout=grace)
        return self._reap(peers[ended[0]]) if ended else None

    def _reap(self, process: _Process) -> str:
        """Wait for a process that ends, and say how it died."""
        with self._reaping:
            process.process.join(timeout=5)
        return f"{process.name} (pid {process.process.pid}) died with exit code {process.process.exitcode}"

    def _break(self, what: str) -> None:
        """Fail the batches in flight, stop every stage and refuse later batches."""
        with self._lock:
            if self._closing or self.failure is not None:
                return
            failed = [job.future for job in self._jobs.values()]
            self._jobs.clear()
            self.failure = f"{what}; {len(failed)} batch(es) in flight failed"
        logger.error("wde: pipeline_parallel %s; stopping the other stages", self.failure)
        self._stop(wait=False)  # the others would wait for the dead stage's hidden states forever
        for future in failed:
            future.set_exception(StageDiedError(f"pipeline_parallel {self.failure}"))

    def _stop(self, wait: bool) -> None:
        for process in self.processes if wait else ():
            try:
                process.conn.send(None)
            except (OSError, ValueError):
                pass
        with self._reaping:  # one thread at a time waits for a child, so none sees it reaped yet "alive"
            for process in self.processes:
                process.process.join(timeout=10 if wait else 0)
                if process.process.is_alive():
                    process.process.kill()
                    process.process.join(timeout=5)

    def _abort(self) -> None:
        self._closing = True
        self._stop(wait=False)
        shutil.rmtree(self._store, ignore_errors=True)

    def healthy(self) -> bool:
        """Whether the executor still takes batches (no stage has died)."""
        return self.failure is None

    def shutdown(self) -> None:
        """Ask every stage to stop and wait for it; remove the rendezvous store."""
        self._closing = True
        self._stop(wait=self.failure is None)
        shutil.rmtree(self._store, ignore_errors=True)
