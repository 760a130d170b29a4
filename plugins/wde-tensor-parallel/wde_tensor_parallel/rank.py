"""Body of one tensor-parallel rank process: join the process group, build the worker as this rank (its
layers take their shard of every weight), then run each batch the engine sends."""

from __future__ import annotations

import os
import traceback
from datetime import timedelta
from typing import Any

import torch


def start_rank(model: str, engine_args: dict[str, Any], dist: dict[str, Any]):
    """Join the group, set this process's tensor-parallel context, and return the loaded worker."""
    import torch.distributed as td

    from wde_core.plugin_api import TensorParallel, assemble_pipeline, set_tensor_parallel, worker_factory

    if dist["backend"] == "nccl":
        torch.cuda.set_device(dist["rank"])
    torch.set_num_threads(engine_args["num_threads"])
    td.init_process_group(dist["backend"], init_method=dist["init_method"], rank=dist["rank"],
                          world_size=dist["size"], timeout=timedelta(minutes=10))
    set_tensor_parallel(TensorParallel(dist["rank"], dist["size"], td.group.WORLD))
    worker = worker_factory(assemble_pipeline(model, **engine_args))()
    worker.load_model()
    return worker


def parameter_bytes(model: torch.nn.Module) -> int:
    """Bytes of the model's parameters on this rank."""
    return sum(p.numel() * p.element_size() for p in model.parameters())


def rank_main(conn, model: str, engine_args: dict[str, Any], dist: dict[str, Any]) -> None:
    """Serve batches until the engine sends ``None``; a failure to start sends its traceback."""
    try:
        worker = start_rank(model, engine_args, dist)
    except BaseException:  # noqa: BLE001 - reported to the engine process, then the rank exits
        conn.send(("failed", traceback.format_exc()))
        raise SystemExit(1) from None
    conn.send(("ready", {"pid": os.getpid(), "parameter_bytes": parameter_bytes(worker.model)}))
    first = dist["rank"] == 0
    while True:
        job = conn.recv()
        if job is None:
            break
        job_id, model_input = job
        try:
            output = worker.execute(model_input)
            conn.send((job_id, True, output if first else None))
        except Exception as exc:  # noqa: BLE001 - the error travels back to the caller's future
            conn.send((job_id, False, f"{type(exc).__name__}: {exc}"))
    torch.distributed.destroy_process_group()
