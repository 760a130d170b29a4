"""The pipeline-parallel executor: N stage processes in a chain joined by torch.distributed (gloo on CPU, NCCL on
CUDA with one device per process), each holding its share of the model's layers. The engine process keeps
scheduling and pre/post processing; each batch goes to every stage, the hidden states flow from stage to stage,
and the last stage returns the output. Up to 2N batches are in flight, so while stage 1 runs batch n, stage 0
runs batch n+1. A stage that dies (or raises, which leaves the chain out of step) fails the batches in flight
with :class:`StageDiedError` naming it, the other stages are stopped, and later batches are refused."""

from __future__ import annotations

from typing import Callable

from wde_pipeline_parallel.layout import Layout, check_layout
from wde_pipeline_parallel.stage import stage_main
from wde_worker_processes.public import ProcessGroupExecutor, WorkerProcess


class StageDiedError(RuntimeError):
    """A pipeline stage died or raised: the batches in flight failed and the executor takes no more work."""


class PipelineParallelExecutor(ProcessGroupExecutor):
    """``pipeline_parallel_size`` stage processes (times ``tensor_parallel_size`` ranks each); each with
    ``num_threads`` (default: the CPUs shared out) CPU threads, or one GPU; ``2 x stages`` batches in flight.
    wde-worker-processes' process group starts them, collects their answers and handles their failures."""

    kind, member, prefix, error = "pipeline_parallel", "stages", "wde-pp", StageDiedError

    @staticmethod
    def check_pipeline(pipeline) -> None:
        """At assembly: refuse a model without cut points or with fewer layers than stages; give the split."""
        check_layout(pipeline)

    def __init__(self, pipeline, make_worker: Callable | None = None) -> None:
        self.layout = Layout.of(pipeline)
        self.max_in_flight = 2 * self.layout.stages
        super().__init__(pipeline, self.layout.processes)

    def process_target(self) -> Callable:
        """Each process runs :func:`wde_pipeline_parallel.stage.stage_main`."""
        return stage_main

    def distributed_setup(self, rank: int, pipeline) -> dict:
        """Its stage, the chain's length, its tensor-parallel group's size and the backend."""
        layout = self.layout
        return {"rank": rank, "stage": rank // layout.tp_size, "stages": layout.stages, "tp_size": layout.tp_size,
                "backend": layout.backend}

    def process_name(self, rank: int) -> str:
        """``stage N`` (``stage N rank M`` with tensor parallelism)."""
        return self.layout.name(rank)

    @property
    def stages(self) -> list[WorkerProcess]:
        """The processes answering for each stage (tensor-parallel rank 0 of each)."""
        return [p for p in self.processes if p.rank % self.layout.tp_size == 0]

    def busy_seconds(self) -> list[float]:
        """Seconds each stage has spent computing so far (waiting for its neighbours not counted)."""
        return [p.busy_seconds for p in self.stages]
