"""Body of one pipeline stage process: join the process group, build this stage's worker, then run each batch
the engine sends (wde-worker-processes' loop): receive the previous stage's hidden states, run the local layers,
send them on (or, on the last stage, return the pooled output). With tensor parallelism too, each stage is a group
of ranks."""

from __future__ import annotations

import time
from typing import Any

import torch

from wde_worker_processes.public import join_process_group, leave_process_group, serve

_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


class Link:
    """Point-to-point transfers of a packed batch's hidden states ``[T, H]`` between neighbouring stages: a header
    (batch id, tokens, width, dtype) then the tensor; a send waits only for the previous send to complete."""

    def __init__(self, previous: int | None, following: int | None, device: torch.device) -> None:
        self.previous, self.following, self.device = previous, following, device
        self._sending: list = []

    def receive(self, job_id: int) -> torch.Tensor:
        """The hidden states of batch ``job_id`` from the previous stage."""
        import torch.distributed as td

        header = torch.empty(4, dtype=torch.int64, device=self.device)
        td.recv(header, src=self.previous)
        sent_id, tokens, width, dtype = header.tolist()
        if sent_id != job_id:
            raise RuntimeError(f"received the hidden states of batch {sent_id} while running batch {job_id}")
        hidden = torch.empty(tokens, width, dtype=_DTYPES[dtype], device=self.device)
        td.recv(hidden, src=self.previous)
        return hidden

    def send(self, job_id: int, hidden: torch.Tensor) -> None:
        """Start sending ``hidden`` of batch ``job_id`` to the next stage (after the previous send completed)."""
        import torch.distributed as td

        if hidden.dim() != 2:
            raise RuntimeError(f"a layer returned hidden states of shape {list(hidden.shape)}; a pipeline stage "
                               "sends [tokens, hidden]")
        self.flush()
        hidden = hidden.contiguous()
        header = torch.tensor([job_id, *hidden.shape, _DTYPES.index(hidden.dtype)], dtype=torch.int64,
                              device=self.device)
        self._sending = [(td.isend(header, dst=self.following), header), (td.isend(hidden, dst=self.following),
                                                                          hidden)]

    def flush(self) -> None:
        """Wait for the sends in flight."""
        for work, _ in self._sending:
            work.wait()
        self._sending = []


def _groups(dist: dict[str, Any]):
    """This process's tensor-parallel group (every process creates every stage's group, in the same order)."""
    import torch.distributed as td

    tp = dist["tp_size"]
    if tp == 1:
        return None
    groups = [td.new_group(list(range(s * tp, (s + 1) * tp))) for s in range(dist["stages"])]
    return groups[dist["stage"]]


def start_stage(model: str, engine_args: dict[str, Any], dist: dict[str, Any]):
    """Join the group, set the tensor-parallel context, and return this stage's loaded worker, its ``link`` set."""
    from wde_core.plugin_api import TensorParallel, assemble_pipeline, set_tensor_parallel
    from wde_pipeline_parallel.stage_worker import stage_worker

    rank, tp, stage, stages = dist["rank"], dist["tp_size"], dist["stage"], dist["stages"]
    join_process_group(dist, engine_args["num_threads"])
    group = _groups(dist)
    if tp > 1:
        set_tensor_parallel(TensorParallel(rank % tp, tp, group))
    pipeline = assemble_pipeline(model, **engine_args)
    attention = pipeline.components["attention_backend"].load()(pipeline)
    worker = stage_worker(pipeline.components["worker"].load(), pipeline, attention, stage, stages)
    worker.load_model()
    worker.link = Link(rank - tp if stage > 0 else None, rank + tp if stage < stages - 1 else None, worker.device)
    return worker


def run_job(worker, job_id: int, model_input) -> tuple[Any, float]:
    """One batch through this stage: (the pooled output on the last stage, else ``None``; seconds computing)."""
    link = worker.link
    incoming = link.receive(job_id) if link.previous is not None else None
    start = time.perf_counter()
    output = worker.run_stage(model_input, incoming)
    busy = time.perf_counter() - start
    if link.following is None:
        return output, busy
    link.send(job_id, output)
    return None, busy


def finish_stage(worker) -> None:
    """Wait for the sends in flight, then leave the process group."""
    worker.link.flush()
    leave_process_group(worker)


def stage_main(conn, model: str, engine_args: dict[str, Any], dist: dict[str, Any]) -> None:
    """Serve batches until the engine sends ``None`` (tensor-parallel rank 0 of each stage answers); a failure to
    start sends its traceback."""
    serve(conn, lambda: start_stage(model, engine_args, dist), run=run_job,
          answers=dist["rank"] % dist["tp_size"] == 0, finish=finish_stage)
