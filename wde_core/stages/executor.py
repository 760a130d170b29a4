"""Executors: the engine submits model inputs and gets futures, so executors may run batches
synchronously, pipelined on threads, or on replicas in other processes, without engine changes."""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable

import torch

from wde_core.stages.model_input import ModelInput


class SyncExecutor:
    """Runs each batch on the calling thread. On CUDA a batch is launched and the call returns: the GPU runs it while
    the engine builds the next (two in flight), and its future waits for it when asked for the result."""

    def __init__(self, pipeline, make_worker: Callable) -> None:
        self.worker = make_worker()
        self.worker.load_model()
        on_cuda = getattr(pipeline, "device", torch.device("cpu")).type == "cuda"
        self.launches = on_cuda and callable(getattr(self.worker, "launch", None))  # else ``execute`` (a plugin's)
        self.max_in_flight = 2 if self.launches else 1

    def submit(self, model_input: ModelInput) -> Future:
        """Start ``model_input`` now; the future holds the output or the exception."""
        future: Future = Future()
        try:
            if self.launches:
                return _Launched(self.worker.launch(model_input))
            future.set_result(self.worker.execute(model_input))
        except Exception as exc:  # noqa: BLE001 - delivered through the future
            future.set_exception(exc)
        return future

    def shutdown(self) -> None:
        """Release the worker."""
        self.worker = None


class _Launched(Future):
    """A launched batch: waits for its results (and records them or their error) when first asked."""

    def __init__(self, wait: Callable[[], dict]) -> None:
        super().__init__()
        self._wait: Callable[[], dict] | None = wait

    def _settle(self) -> None:
        wait, self._wait = self._wait, None
        if wait is not None:
            try:
                self.set_result(wait())
            except Exception as exc:  # noqa: BLE001 - delivered through the future
                self.set_exception(exc)

    def result(self, timeout: float | None = None):
        """The batch's outputs on the CPU (waits for the device)."""
        self._settle()
        return super().result(timeout)

    def exception(self, timeout: float | None = None):
        """The batch's error, or ``None`` (waits for the device)."""
        self._settle()
        return super().exception(timeout)


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
