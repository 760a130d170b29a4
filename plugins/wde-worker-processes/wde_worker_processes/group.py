"""The process group: what every multi-process executor of torch.distributed workers shares (tensor_parallel's
ranks, pipeline_parallel's stages): start the processes, wait until each loaded its part of the model, send every
batch to all of them, collect their answers, and on a process that dies or raises fail the batches in flight with an
error naming it, stop the others and refuse later batches. A subclass says what a process runs and how it is named;
each process runs :func:`wde_worker_processes.child.serve` after joining the group."""

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
from wde_worker_processes.spawn import await_ready, spawn

logger = logging.getLogger("wde")


@dataclasses.dataclass
class WorkerProcess:
    """One worker process of the group: its global rank, name (for errors), process and pipe end."""

    rank: int
    name: str
    process: Any
    conn: Any
    parameter_bytes: int = 0  # the weights it holds, measured in the process once loaded
    busy_seconds: float = 0.0  # computing, as the process reports with its answers
    stage: int = 0

    @property
    def index(self) -> int:
        """The process's rank (tensor_parallel's name for it)."""
        return self.rank


@dataclasses.dataclass
class _Job:
    future: Future
    waiting: int
    result: Any = None


class ProcessGroupExecutor:
    """The base of a multi-process executor: subclasses set :attr:`kind` (``"tensor_parallel"``), :attr:`error`
    (raised and set on futures), :attr:`member` (``"ranks"``) and :attr:`prefix` (``"wde-tp"``), and implement
    :meth:`process_target`, :meth:`distributed_setup` and :meth:`process_name`."""

    kind = "process_group"
    member = "processes"
    prefix = "wde-group"  # of its processes', threads' and rendezvous directory's names
    error: type[Exception] = RuntimeError

    def __init__(self, pipeline, count: int) -> None:
        self.failure: str | None = None
        self._closing = False
        self._lock = threading.Lock()
        self._reaping = threading.Lock()
        self._jobs: dict[int, _Job] = {}
        self._next_job = 0
        self._store = tempfile.mkdtemp(prefix=f"{self.prefix}-")
        ctx = multiprocessing.get_context("spawn")
        self.processes = [self._start(ctx, rank, count, pipeline) for rank in range(count)]
        starting = {p.conn: p for p in self.processes}
        while starting:  # any process first: the others may wait for a failed one in init_process_group
            for conn in wait(list(starting)):
                self._await_ready(starting.pop(conn))
        for process in self.processes:
            threading.Thread(target=self._read, args=(process,), daemon=True,
                             name=f"{self.prefix}-{process.name}-reader".replace(" ", "-")).start()

    # -- what a subclass says ---------------------------------------------------------------------------------
    def process_target(self) -> Callable:
        """The function each process runs: ``target(conn, model_path, engine_args, dist)``, ``dist`` holding the
        group's ``size``, its ``init_method`` and what :meth:`distributed_setup` gives."""
        raise NotImplementedError

    def distributed_setup(self, rank: int, pipeline) -> dict:
        """The ``dist`` dict process ``rank`` gets (its rank, the group's size, backend, ...), less ``init_method``."""
        raise NotImplementedError

    def process_name(self, rank: int) -> str:
        """How errors name process ``rank`` (``"rank 1"``, ``"stage 1"``)."""
        raise NotImplementedError

    def takes_output(self, process: WorkerProcess, payload: Any) -> bool:
        """Whether ``payload`` answered by ``process`` is the batch's output (the others answer that they are done)."""
        return payload is not None

    # -- the group ----------------------------------------------------------------------------------------------
    def _start(self, ctx, rank: int, count: int, pipeline) -> WorkerProcess:
        threads = pipeline.args.num_threads or max(1, (os.cpu_count() or 1) // count)
        dist = {"size": count, **self.distributed_setup(rank, pipeline),
                "init_method": f"file://{os.path.join(self._store, 'store')}"}
        name = self.process_name(rank)
        process, conn = spawn(ctx, self.process_target(),
                              (str(pipeline.model.path), child_engine_args(pipeline, rank, threads), dist),
                              f"{self.prefix}-{name}".replace(" ", "-"))
        return WorkerProcess(rank, name, process, conn, stage=dist.get("stage", 0))

    def _await_ready(self, process: WorkerProcess) -> None:
        detail = await_ready(process.conn, process.process, f"{self.kind} {process.name}", self.kind, self.error,
                             self._abort)
        process.parameter_bytes = detail["parameter_bytes"]

    def submit(self, model_input: ModelInput) -> Future:
        """Send ``model_input`` to every process; the future holds the output once all of them answered."""
        future: Future = Future()
        with self._lock:  # one order of batches in every process: their collectives and transfers must match
            if self.failure is not None:
                future.set_exception(self.error(f"the {self.kind} executor takes no more work: {self.failure}; "
                                                "build a new Engine"))
                return future
            job_id, self._next_job = self._next_job, self._next_job + 1
            self._jobs[job_id] = _Job(future, len(self.processes))
            try:
                for process in self.processes:
                    process.conn.send((job_id, model_input))
            except (OSError, ValueError):
                pass  # the reader of the process that died reports it
        return future

    def _read(self, process: WorkerProcess) -> None:
        while True:
            try:
                job_id, ok, payload, busy = process.conn.recv()
            except (EOFError, OSError):
                if self._closing or self.failure is not None:
                    return  # stopped by us: whoever stopped it reaps it (two threads reaping one child race)
                self._break(self._reap(process))  # the pipe closed: the process is gone or going
                return
            if not ok:  # the others may wait for it in a collective or a transfer: the group is out of step
                self._break(self._dead_peer(process) or f"{process.name} raised {payload}")
                continue
            self._answered(process, job_id, payload, busy)

    def _answered(self, process: WorkerProcess, job_id: int, payload: Any, busy: float) -> None:
        with self._lock:
            process.busy_seconds += busy
            job = self._jobs.get(job_id)
            if job is None:
                return
            job.waiting -= 1
            job.result = payload if self.takes_output(process, payload) else job.result
            if job.waiting:
                return
            del self._jobs[job_id]
        job.future.set_result(job.result)

    def _dead_peer(self, raised: WorkerProcess, grace: float = 1.0) -> str | None:
        """A peer that died: the cause when a process raised an error because that peer was gone."""
        peers = {p.process.sentinel: p for p in self.processes if p is not raised}
        ended = wait(list(peers), timeout=grace)
        return self._reap(peers[ended[0]]) if ended else None

    def _reap(self, process: WorkerProcess) -> str:
        """Wait for a process that ends, and say how it died."""
        with self._reaping:
            process.process.join(timeout=5)
        return f"{process.name} (pid {process.process.pid}) died with exit code {process.process.exitcode}"

    def _break(self, what: str) -> None:
        """Fail the batches in flight, stop every process and refuse later batches."""
        with self._lock:
            if self._closing or self.failure is not None:
                return
            failed = [job.future for job in self._jobs.values()]
            self._jobs.clear()
            self.failure = f"{what}; {len(failed)} batch(es) in flight failed"
        logger.error("wde: %s %s; stopping the other %s", self.kind, self.failure, self.member)
        self._stop(wait=False)  # the others would wait for the dead one in their next collective or transfer
        for future in failed:
            future.set_exception(self.error(f"{self.kind} {self.failure}"))

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
        """Whether the executor still takes batches (no process has died)."""
        return self.failure is None

    def shutdown(self) -> None:
        """Ask every process to stop and wait for it; remove the rendezvous store."""
        self._closing = True
        self._stop(wait=self.failure is None)
        shutil.rmtree(self._store, ignore_errors=True)
