"""The tensor-parallel executor: N rank processes joined by torch.distributed (gloo on CPU, NCCL on CUDA with
one device per rank), each holding 1/N of the weights. The engine process keeps scheduling and pre/post
processing; each batch goes to every rank once, rank 0 returns the output. A rank that dies (or raises, which
leaves the others out of step) fails the batches in flight with :class:`RankDiedError` naming it, the other ranks
are stopped, and later batches are refused."""

from __future__ import annotations

from typing import Any, Callable

import torch

from wde_tensor_parallel.rank import rank_main
from wde_tensor_parallel.sharding import TensorParallelError, sharding_plan
from wde_worker_processes.public import ProcessGroupExecutor, WorkerProcess


class RankDiedError(RuntimeError):
    """A tensor-parallel rank died or raised: the batches in flight failed and the executor takes no more work."""


def tensor_parallel_size(pipeline) -> int:
    """``tensor_parallel_size``, else every CUDA device (CUDA) or 2 (CPU); refused beyond the CUDA devices."""
    size = pipeline.args.tensor_parallel_size
    if pipeline.device.type != "cuda":
        return size or 2
    devices = torch.cuda.device_count()
    if (size or devices) > devices or (size or devices) < 1:
        raise TensorParallelError(f"tensor_parallel_size={size} needs that many CUDA devices; {devices} visible")
    return size or devices


class TensorParallelExecutor(ProcessGroupExecutor):
    """``tensor_parallel_size`` rank processes; each with ``num_threads`` (default: the CPUs shared out) CPU
    threads, or one GPU (``cuda:rank``); two batches in flight."""

    max_in_flight = 2
    kind, member, prefix, error = "tensor_parallel", "ranks", "wde-tp", RankDiedError

    @staticmethod
    def check_pipeline(pipeline) -> None:
        """At assembly: refuse a model without TP support or whose heads N does not divide; give the sharding."""
        size = tensor_parallel_size(pipeline)
        backend = "nccl" if pipeline.device.type == "cuda" else "gloo"
        pipeline.reasons.update(sharding_plan(pipeline, size).reasons(backend))

    def __init__(self, pipeline, make_worker: Callable | None = None) -> None:
        self.size = tensor_parallel_size(pipeline)
        self.cuda = pipeline.device.type == "cuda"
        super().__init__(pipeline, self.size)

    @property
    def ranks(self) -> list[WorkerProcess]:
        """The rank processes, rank 0 first."""
        return self.processes

    def process_target(self) -> Callable:
        """Each rank runs :func:`wde_tensor_parallel.rank.rank_main`."""
        return rank_main

    def distributed_setup(self, rank: int, pipeline) -> dict:
        """Rank ``rank`` (of the group's ``size``), NCCL on CUDA, gloo on CPU."""
        return {"rank": rank, "backend": "nccl" if self.cuda else "gloo"}

    def process_name(self, rank: int) -> str:
        """``rank N``."""
        return f"rank {rank}"

    def takes_output(self, process: WorkerProcess, payload: Any) -> bool:
        """Rank 0 answers with the output."""
        return process.rank == 0
