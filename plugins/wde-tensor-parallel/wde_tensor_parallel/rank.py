"""Body of one tensor-parallel rank process: join the process group, build the worker as this rank (its
layers take their shard of every weight), then run each batch the engine sends (wde-worker-processes' loop)."""

from __future__ import annotations

from typing import Any

from wde_worker_processes.public import join_process_group, leave_process_group, load_worker, serve


def start_rank(model: str, engine_args: dict[str, Any], dist: dict[str, Any]):
    """Join the group, set this process's tensor-parallel context, and return the loaded worker."""
    import torch.distributed as td

    from wde_core.plugin_api import TensorParallel, set_tensor_parallel

    join_process_group(dist, engine_args["num_threads"])
    set_tensor_parallel(TensorParallel(dist["rank"], dist["size"], td.group.WORLD))
    return load_worker(model, engine_args)


def rank_main(conn, model: str, engine_args: dict[str, Any], dist: dict[str, Any]) -> None:
    """Serve batches until the engine sends ``None`` (rank 0 answers with the output); a failure to start sends
    its traceback."""
    serve(conn, lambda: start_rank(model, engine_args, dist), answers=dist["rank"] == 0, finish=leave_process_group)
