"""wde-worker-processes: worker processes for multi-process executors (the child loop, spawning, the process group)."""
