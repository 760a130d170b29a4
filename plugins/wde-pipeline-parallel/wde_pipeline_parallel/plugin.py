"""Registers the ``pipeline_parallel`` executor (its check and stage split run when a pipeline is assembled)."""

from __future__ import annotations

from wde_core.plugin_api import hookimpl


@hookimpl
def wde_register_executors(register):
    """N stage processes in a chain, each holding its share of the model's layers; batches flow through them."""
    register("pipeline_parallel", "wde_pipeline_parallel.executor:PipelineParallelExecutor",
             "pipeline_parallel_size stages (gloo on CPU, NCCL on CUDA), 1/N of the layers each")
