"""Executors: the engine submits model inputs and gets futures, so executors may run batches
synchronously, pipelined on threads, or on replicas in other processes, without engine changes."""

from __future__ import annotations

from concurrent.futures import Future
from typing import Callable

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
