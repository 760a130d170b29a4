"""wde-worker-processes' public API, for executor plugins: the body of a worker process (:func:`serve` and what a
start function uses), the engine side's :func:`spawn` / :func:`await_ready`, and the torch.distributed process group
(:class:`ProcessGroupExecutor`) that wde-tensor-parallel and wde-pipeline-parallel build on."""

from wde_worker_processes.child import (execute, join_process_group, leave_process_group, load_worker,
                                        parameter_bytes, serve)
from wde_worker_processes.group import ProcessGroupExecutor, WorkerProcess
from wde_worker_processes.spawn import await_ready, spawn

__all__ = ["ProcessGroupExecutor", "WorkerProcess", "await_ready", "execute", "join_process_group",
           "leave_process_group", "load_worker", "parameter_bytes", "serve", "spawn"]
