"""wde-tensor-parallel: the ``tensor_parallel`` executor and its sharding view."""
