"""Registers the ``tensor_parallel`` executor (its check and sharding view run when a pipeline is assembled)."""

from __future__ import annotations

from wde_core.plugin_api import hookimpl


@hookimpl
def wde_register_executors(register):
    """N rank processes joined by torch.distributed, each holding 1/N of every attention and MLP weight."""
    register("tensor_parallel", "wde_tensor_parallel.executor:TensorParallelExecutor",
             "tensor_parallel_size ranks (gloo on CPU, NCCL on CUDA), 1/N of the weights each")
