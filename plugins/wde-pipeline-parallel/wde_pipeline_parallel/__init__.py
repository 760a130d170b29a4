"""wde-pipeline-parallel: the ``pipeline_parallel`` executor, its stage split and stage processes."""
