"""Data-parallel executor: model replicas in spawned worker processes, batches dealt by token load; a
replica that dies is reported, its batches fail with :class:`ReplicaDiedError`, later ones go elsewhere."""

from __future__ import annotations

import dataclasses
import logging
import multiprocessing
import os
import threading
from concurrent.futures import Future
from typing import Any, Callable

import torch

from wde_core.plugin_api import ModelInput, child_engine_args
from wde_worker_processes.public import await_ready, load_worker, serve, spawn

logger = logging.getLogger("wde")


class ReplicaDiedError(RuntimeError):
    """A replica process died; the batches it held failed."""


def _replica_main(conn, model: str, engine_args: dict[str, Any]) -> None:
    """Body of a replica process: build a worker, then serve batches; a failure to start sends its traceback."""
    serve(conn, lambda: load_worker(model, engine_args))


@dataclasses.dataclass
class _Replica:
    index: int
    process: Any
    conn: Any
    pending: dict[int, tuple[Future, int]] = dataclasses.field(default_factory=dict)
    alive: bool = True
    served_tokens: int = 0

    @property
    def load(self) -> int:
        return sum(tokens for _, tokens in self.pending.values())


class DataParallelExecutor:
    """``num_replicas`` model replicas, each with ``threads_per_replica`` CPU threads (CPU) or one
    GPU (``cuda:i``); each batch goes to the live replica with the fewest tokens in flight."""

    def __init__(self, pipeline, make_worker: Callable | None = None) -> None:
        args = pipeline.args
        cuda = pipeline.device.type == "cuda"
        self.num_replicas = args.num_replicas or (max(1, torch.cuda.device_count()) if cuda else 2)
        threads = args.threads_per_replica or max(1, (os.cpu_count() or 1) // self.num_replicas)
        self.max_in_flight = 2 * self.num_replicas
        self.problems: list[str] = []
        self._closing = False
        self._lock = threading.Lock()
        self._next_job = 0
        ctx = multiprocessing.get_context("spawn")
        self.replicas = [self._start(ctx, i, pipeline, threads) for i in range(self.num_replicas)]
        for replica in self.replicas:
            self._await_ready(replica)

    def _start(self, ctx, index: int, pipeline, threads: int) -> _Replica:
        replica_args = child_engine_args(pipeline, index, threads)
        process, conn = spawn(ctx, _replica_main, (str(pipeline.model.path), replica_args), f"wde-replica-{index}")
        return _Replica(index, process, conn)

    def _await_ready(self, replica: _Replica) -> None:
        await_ready(replica.conn, replica.process, f"replica {replica.index}", "data_parallel", ReplicaDiedError,
                    self.shutdown)
        threading.Thread(target=self._read, args=(replica,), name=f"wde-replica-{replica.index}-reader",
                         daemon=True).start()

    def submit(self, model_input: ModelInput) -> Future:
        """Send ``model_input`` to the least-loaded live replica."""
        future: Future = Future()
        tokens = int(sum(model_input.seq_lens))
        with self._lock:
            live = [r for r in self.replicas if r.alive]
            if not live:
                future.set_exception(ReplicaDiedError("no live replica: " + "; ".join(self.problems)))
                return future
            replica = min(live, key=lambda r: r.load)
            job_id = self._next_job
            self._next_job += 1
            replica.pending[job_id] = (future, tokens)
            replica.served_tokens += tokens
        try:
            replica.conn.send((job_id, model_input))
        except (OSError, ValueError):
            self._replica_died(replica)
        return future

    def _read(self, replica: _Replica) -> None:
        while True:
            try:
                job_id, ok, payload, _busy = replica.conn.recv()
            except (EOFError, OSError):
                self._replica_died(replica)
                return
            with self._lock:
                future, _ = replica.pending.pop(job_id)
            if ok:
                future.set_result(payload)
            else:
                future.set_exception(RuntimeError(f"replica {replica.index}: {payload}"))

    def _replica_died(self, replica: _Replica) -> None:
        with self._lock:
            if not replica.alive or self._closing:
                replica.alive = False
                return
            replica.alive = False
            failed = list(replica.pending.values())
            replica.pending.clear()
        replica.process.join(timeout=5)
        message = (f"replica {replica.index} (pid {replica.process.pid}) died with exit code "
                   f"{replica.process.exitcode}; {len(failed)} batch(es) in flight failed")
        self.problems.append(message)
        logger.error("wde: %s", message)
        for future, _ in failed:
            future.set_exception(ReplicaDiedError(message))

    def healthy(self) -> bool:
        """Whether a replica is left to take batches (``wde serve``'s readiness asks)."""
        return any(replica.alive for replica in self.replicas)

    def shutdown(self) -> None:
        """Ask every live replica to stop and wait for it."""
        self._closing = True
        for replica in self.replicas:
            if replica.alive:
                replica.alive = False
                try:
                    replica.conn.send(None)
                except (OSError, ValueError):
                    pass
        for replica in self.replicas:
            replica.process.join(timeout=10)
            if replica.process.is_alive():
                replica.process.kill()

