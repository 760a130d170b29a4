"""Executors: the engine submits model inputs and gets futures, so executors may run batches
synchronously, pipelined on threads, or on replicas in other processes, without engine changes."""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable

import torch

from wde_core.stages.model_input import ModelInput


class SyncExecutor:
    """Runs each batch on the calling thread; the returned future is already done."""

    max_in_flight = 1

    def __init__(self, pipeline, make_worker: Callable) -> None:
        self.worker = make_worker()
        self.worker.load_model()

    def submit(self, model_input: ModelInput) -> Future:
        """Execute ``model_input`` now; the future holds the output or the exception."""
        future: Future = Future()
        try:
            future.set_result(self.worker.execute(model_input))
        except Exception as exc:  # noqa: BLE001 - delivered through the future
            future.set_exception(exc)
        return future

    def shutdown(self) -> None:
        """Release the worker."""
        self.worker = None


class PipelinedExecutor:
    """Runs batches on one worker thread, two in flight: while batch n runs on the model, the
    engine builds batch n+1 and processes the outputs of batch n-1 on the calling thread."""

    max_in_flight = 2

    def __init__(self, pipeline, make_worker: Callable) -> None:
        self.worker = make_worker()
        self.worker.load_model()
        threads = torch.get_num_threads()
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="wde-worker",
                                       initializer=torch.set_num_threads, initargs=(threads,))

    def submit(self, model_input: ModelInput) -> Future:
        """Queue ``model_input`` on the worker thread."""
        return self.pool.submit(self.worker.execute, model_input)

    def shutdown(self) -> None:
        """Finish queued batches and stop the thread."""
        self.pool.shutdown(wait=True)
