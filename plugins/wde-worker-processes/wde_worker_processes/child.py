"""The body of a worker process, the same for every multi-process executor (data_parallel's replicas,
tensor_parallel's ranks, pipeline_parallel's stages): build the worker, say it is ready (or send the traceback of
why it could not start), then run each batch the engine process sends until it sends ``None``.

The pipe protocol, which :mod:`wde_worker_processes.group` and the data-parallel executor read:

- once: ``("ready", {"pid": ..., "parameter_bytes": ...})`` or ``("failed", traceback_text)`` (the process then
  exits with code 1);
- per batch ``(job_id, model_input)``: ``(job_id, True, output_or_None, busy_seconds)``, or
  ``(job_id, False, "ErrorType: message", 0.0)`` when the batch raised (the process serves on)."""

from __future__ import annotations

import os
import time
import traceback
from datetime import timedelta
from typing import Any, Callable

import torch


def load_worker(model: str, engine_args: dict[str, Any]):
    """The pipeline's worker assembled from the installed plugins, its model loaded."""
    from wde_core.plugin_api import assemble_pipeline, worker_factory

    worker = worker_factory(assemble_pipeline(model, **engine_args))()
    worker.load_model()
    return worker


def join_process_group(dist: dict[str, Any], num_threads: int) -> None:
    """Join the torch.distributed group ``dist`` describes (its ``rank``, ``size``, ``backend``, ``init_method``),
    with one CUDA device per rank under NCCL and ``num_threads`` torch threads."""
    import torch.distributed as td

    if dist["backend"] == "nccl":
        torch.cuda.set_device(dist["rank"])
    torch.set_num_threads(num_threads)
    td.init_process_group(dist["backend"], init_method=dist["init_method"], rank=dist["rank"],
                          world_size=dist["size"], timeout=timedelta(minutes=10))


def leave_process_group(worker) -> None:
    """Leave the torch.distributed group (a ``finish`` for :func:`serve`)."""
    torch.distributed.destroy_process_group()


def parameter_bytes(model: torch.nn.Module) -> int:
    """Bytes of the parameters this process holds (those left on the meta device, held elsewhere, not counted)."""
    return sum(p.numel() * p.element_size() for p in model.parameters() if not p.is_meta)


def execute(worker, job_id: int, model_input) -> tuple[Any, float]:
    """One batch through ``worker.execute``: (its output, seconds computing)."""
    start = time.perf_counter()
    output = worker.execute(model_input)
    return output, time.perf_counter() - start


def serve(conn, start: Callable[[], Any], run: Callable[[Any, int, Any], tuple[Any, float]] = execute,
          answers: bool = True, finish: Callable[[Any], None] | None = None) -> None:
    """Build the worker with ``start()``, then answer every batch on ``conn`` with ``run(worker, job_id, input)``
    until the engine sends ``None``, then call ``finish(worker)``. A failure to start sends its traceback and
    exits; a batch that raises sends its error and the loop serves on. ``answers=False``: this process's outputs
    are not the batch's (a tensor-parallel rank other than 0), it only says it is done."""
    try:
        worker = start()
    except BaseException:  # noqa: BLE001 - reported to the engine process, then this process exits
        conn.send(("failed", traceback.format_exc()))
        raise SystemExit(1) from None
    conn.send(("ready", {"pid": os.getpid(), "parameter_bytes": parameter_bytes(worker.model)}))
    while True:
        job = conn.recv()
        if job is None:
            break
        job_id, model_input = job
        try:
            output, busy = run(worker, job_id, model_input)
            conn.send((job_id, True, output if answers else None, busy))
        except Exception as exc:  # noqa: BLE001 - the error travels back to the caller's future
            conn.send((job_id, False, f"{type(exc).__name__}: {exc}", 0.0))
    if finish is not None:
        finish(worker)
