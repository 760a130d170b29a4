"""wde-data-parallel: the ``data_parallel`` executor (model replicas in worker processes)."""
