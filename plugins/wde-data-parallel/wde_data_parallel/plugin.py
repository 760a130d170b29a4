"""Registers the ``data_parallel`` executor."""

from __future__ import annotations

from wde_core.plugin_api import hookimpl


@hookimpl
def wde_register_executors(register):
    """``num_replicas`` model replicas in spawned processes, each batch to the least-loaded live one."""
    register("data_parallel", "wde_data_parallel.executor:DataParallelExecutor",
             "replicas in worker processes, batches dealt by token load")
