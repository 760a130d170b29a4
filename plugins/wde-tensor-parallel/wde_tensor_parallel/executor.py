"""The tensor-parallel executor: N rank processes joined by torch.distributed (gloo on CPU, NCCL on CUDA with
one device per rank), each holding 1/N of the weights. The engine process keeps scheduling and pre/post
processing; each batch goes to every rank once, rank 0 returns the output. A rank that dies (or raises, which
leaves the others out of step) fails the batches in flight with :class:`RankDiedError` naming it, the other ranks
are stopped, and later batches are refused."""

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

import torch

from wde_core.plugin_api import ModelInput, child_engine_args
from wde_tensor_parallel.rank import rank_main
from wde_tensor_parallel.sharding import TensorParallelError, sharding_plan

logger = logging.getLogger("wde")


class RankDiedError(RuntimeError):
    """A tensor-parallel rank died or raised: the batches in flight failed and the executor takes no more work."""


@dataclasses.dataclass
class _Rank:
    index: int
    process: Any
    conn: Any
    parameter_bytes: int = 0


@dataclasses.dataclass
class _Job:
    future: Future
    waiting: int
    result: Any = None


def tensor_parallel_size(pipeline) -> int:
    """``tensor_parallel_size``, else every CUDA device (CUDA) or 2 (CPU); refused beyond the CUDA devices."""
    size = pipeline.args.tensor_parallel_size
    if pipeline.device.type != "cuda":
        return size or 2
    devices = torch.cuda.device_count()
    if (size or devices) > devices or (size or devices) < 1:
        raise TensorParallelError(f"tensor_parallel_size={size} needs that many CUDA devices; {devices} visible")
    return size or devices


class TensorParallelExecutor:
    """``tensor_parallel_size`` rank processes; each with ``num_threads`` (default: the CPUs shared out) CPU
    threads, or one GPU (``cuda:rank``); two batches in flight."""

    max_in_flight = 2

    @staticmethod
    def check_pipeline(pipeline) -> None:
        """At assembly: refuse a model without TP support or whose heads N does not divide; give the sharding."""
        size = tensor_parallel_size(pipeline)
        backend = "nccl" if pipeline.device.type == "cuda" else "gloo"
        pipeline.reasons.update(sharding_plan(pipeline, size).reasons(backend))

    def __init__(self, pipeline, make_worker: Callable | None = None) -> None:
        self.size = tensor_parallel_size(pipeline)
        self.failure: str | None = None
        self._closing = False
        self._lock = threading.Lock()
        self._reaping = threading.Lock()
        self._jobs: dict[int, _Job] = {}
        self._next_job = 0
        self._store = tempfile.mkdtemp(prefix="wde-tp-")
        ctx = multiprocessing.get_context("spawn")
        self.ranks = [self._start(ctx, rank, pipeline) for rank in range(self.size)]
        starting = {rank.conn: rank for rank in self.ranks}
        while starting:  # any rank first: the others may wait for a failed one in init_process_group
            for conn in wait(list(starting)):
                self._await_ready(starting.pop(conn))
        for rank in self.ranks:
            threading.Thread(target=self._read, args=(rank,), name=f"wde-tp-rank-{rank.index}-reader",
                             daemon=True).start()

    def _start(self, ctx, rank: int, pipeline) -> _Rank:
        cuda = pipeline.device.type == "cuda"
        threads = pipeline.args.num_threads or max(1, (os.cpu_count() or 1) // self.size)
        args = child_engine_args(pipeline, rank, threads)
        dist = {"rank": rank, "size": self.size, "backend": "nccl" if cuda else "gloo",
                "init_method": f"file://{os.path.join(self._store, 'store')}"}
        parent, child = ctx.Pipe()
        process = ctx.Process(target=rank_main, args=(child, str(pipeline.model.path), args, dist),
                              name=f"wde-tp-rank-{rank}", daemon=True)
        process.start()
        child.close()
        return _Rank(rank, process, parent)

    def _await_ready(self, rank: _Rank) -> None:
        try:
            status, detail = rank.conn.recv()
        except EOFError:
            rank.process.join(timeout=5)
            self._abort()
            raise RankDiedError(f"tensor_parallel rank {rank.index} exited while loading the model (exit code "
                                f"{rank.process.exitcode}); started from a script, tensor_parallel needs the "
                                "script's work under `if __name__ == \"__main__\":`") from None
        if status == "failed":
            self._abort()
            raise RankDiedError(f"tensor_parallel rank {rank.index} failed while loading the model:\n{detail}")
        rank.parameter_bytes = detail["parameter_bytes"]

    def submit(self, model_input: ModelInput) -> Future:
        """Send ``model_input`` to every rank; the future holds rank 0's output once all ranks answered."""
        future: Future = Future()
        with self._lock:  # one order of batches on every rank: their collectives must match
            if self.failure is not None:
                future.set_exception(RankDiedError(f"the tensor_parallel executor takes no more work: "
                                                   f"{self.failure}; build a new Engine"))
                return future
            job_id, self._next_job = self._next_job, self._next_job + 1
            self._jobs[job_id] = _Job(future, self.size)
            try:
                for rank in self.ranks:
                    rank.conn.send((job_id, model_input))
            except (OSError, ValueError):
                pass  # the reader of the rank that died reports it
        return future

    def _read(self, rank: _Rank) -> None:
        while True:
            try:
                job_id, ok, payload = rank.conn.recv()
            except (EOFError, OSError):
                if self._closing or self.failure is not None:
                    return  # stopped by us: whoever stopped it reaps it (two threads reaping one child race)
                self._break(self._reap(rank))  # the pipe closed: the process is gone or going
                return
            if not ok:  # the other ranks may wait for it in a collective: the group is out of step
                self._break(self._dead_peer(rank) or f"rank {rank.index} raised {payload}")
                continue
            with self._lock:
                job = self._jobs.get(job_id)
                if job is None:
                    continue
                job.waiting -= 1
                job.result = payload if rank.index == 0 else job.result
                if job.waiting:
                    continue
                del self._jobs[job_id]
            job.future.set_result(job.result)

    def _dead_peer(self, raised: _Rank, grace: float = 1.0) -> str | None:
        """A peer that died: the cause when a rank raised a collective error because that peer was gone."""
        peers = {rank.process.sentinel: rank for rank in self.ranks if rank is not raised}
        ended = wait(list(peers), timeout=grace)
        if not ended:
            return None
        return self._reap(peers[ended[0]])

    def _reap(self, rank: _Rank) -> str:
        """Wait for a rank whose process ends, and say how it died."""
        with self._reaping:
            rank.process.join(timeout=5)
        return f"rank {rank.index} (pid {rank.process.pid}) died with exit code {rank.process.exitcode}"

    def _break(self, what: str) -> None:
        """Fail the batches in flight, stop every rank and refuse later batches."""
        with self._lock:
            if self._closing or self.failure is not None:
                return
            failed = [job.future for job in self._jobs.values()]
            self._jobs.clear()
            self.failure = f"{what}; {len(failed)} batch(es) in flight failed"
        logger.error("wde: tensor_parallel %s; stopping the other ranks", self.failure)
        self._stop_ranks(wait=False)  # the others would wait for the dead rank in their next collective
        for future in failed:
            future.set_exception(RankDiedError(f"tensor_parallel {self.failure}"))

    def _stop_ranks(self, wait: bool) -> None:
        for rank in self.ranks:
            if wait:
                try:
                    rank.conn.send(None)
                except (OSError, ValueError):
                    pass
        with self._reaping:  # one thread at a time waits for a child, so none sees it reaped yet "alive"
            for rank in self.ranks:
                rank.process.join(timeout=10 if wait else 0)
                if rank.process.is_alive():
                    rank.process.kill()
                    rank.process.join(timeout=5)

    def _abort(self) -> None:
        self._closing = True
        self._stop_ranks(wait=False)
        shutil.rmtree(self._store, ignore_errors=True)

    def healthy(self) -> bool:
        """Whether the executor still takes batches (no rank has died)."""
        return self.failure is None

    def shutdown(self) -> None:
        """Ask every rank to stop and wait for it; remove the rendezvous store."""
        self._closing = True
        self._stop_ranks(wait=self.failure is None)
        shutil.rmtree(self._store, ignore_errors=True)
