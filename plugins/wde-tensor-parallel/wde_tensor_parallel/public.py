"""wde-tensor-parallel's public API for other plugins: the process group its executor is built on (wde-pipeline-parallel
builds its stages on it too)."""

from wde_tensor_parallel.processes import ProcessGroupExecutor, WorkerProcess

__all__ = ["ProcessGroupExecutor", "WorkerProcess"]
