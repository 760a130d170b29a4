"""The worker-process loop (``serve``) over a real pipe with a real worker, run on a thread of this process: each
batch's output equals what the same worker gives the sync executor, a batch that raises sends its error and the
loop serves on, a process that does not answer sends only that it is done, ``None`` ends the loop and calls
``finish``, and a start that fails sends its traceback and exits with code 1. The executors that spawn these
processes (data_parallel, tensor_parallel, pipeline_parallel) test crashes and shutdown in their own tests."""

from __future__ import annotations

import threading
from multiprocessing import Pipe

import pytest
import torch

from wde_core import Engine
from wde_worker_processes.public import load_worker, parameter_bytes, serve

TEXTS = ["a", "two words", "a sentence of several words, packed with the others", "short " * 40]


def served(start, **options):
    """(the engine side of the pipe, the thread running ``serve`` on the other end, what ``finish`` received)."""
    engine_side, process_side = Pipe()
    finished: list = []
    thread = threading.Thread(target=serve, args=(process_side, start), daemon=True,
                              kwargs={**options, "finish": finished.append})
    thread.start()
    return engine_side, thread, finished


def as_tensors(output) -> list[torch.Tensor]:
    """The tensors of a worker's output (a tensor, or a dict or sequence of them), in order."""
    if isinstance(output, torch.Tensor):
        return [output]
    values = output.values() if isinstance(output, dict) else output
    return [tensor for value in values for tensor in as_tensors(value)]


@pytest.fixture(scope="module")
def sync_engine(tiny_st_bert_dir):
    with Engine(str(tiny_st_bert_dir), device="cpu") as engine:
        yield engine


def test_batches_come_back_as_the_sync_executor_computes_them_and_errors_travel(sync_engine, tiny_st_bert_dir):
    batch = sync_engine.builder.build(sync_engine.prepare("encode", TEXTS).requests)
    expected = as_tensors(sync_engine.executor.submit(batch).result())
    conn, thread, finished = served(lambda: load_worker(str(tiny_st_bert_dir), {"device": "cpu"}))
    status, detail = conn.recv()
    assert status == "ready" and detail["parameter_bytes"] == parameter_bytes(sync_engine.executor.worker.model) > 0
    conn.send((7, batch))
    job_id, ok, output, busy = conn.recv()
    assert (job_id, ok) == (7, True) and busy > 0
    ours = as_tensors(output)
    assert len(ours) == len(expected) >= 1 and all(torch.equal(a, b) for a, b in zip(ours, expected))
    conn.send((8, None))  # the worker fails on it; the loop serves on
    job_id, ok, message, busy = conn.recv()
    assert (job_id, ok, busy) == (8, False, 0.0) and message.startswith("AttributeError: ")
    conn.send((9, batch))
    assert conn.recv()[:2] == (9, True)
    conn.send(None)
    thread.join(timeout=30)
    assert not thread.is_alive() and len(finished) == 1 and finished[0].model is not None


def test_a_process_that_does_not_answer_says_only_that_it_is_done(sync_engine, tiny_st_bert_dir):
    batch = sync_engine.builder.build(sync_engine.prepare("encode", TEXTS[:2]).requests)
    conn, thread, _ = served(lambda: load_worker(str(tiny_st_bert_dir), {"device": "cpu"}), answers=False)
    assert conn.recv()[0] == "ready"
    conn.send((0, batch))
    job_id, ok, output, busy = conn.recv()
    assert (job_id, ok, output) == (0, True, None) and busy > 0
    conn.send(None)
    thread.join(timeout=30)
    assert not thread.is_alive()


def test_a_start_that_fails_sends_its_traceback_and_exits(tmp_path):
    raised: list = []

    def run(conn, start):
        try:
            serve(conn, start)
        except SystemExit as exit_:
            raised.append(exit_.code)

    engine_side, process_side = Pipe()
    thread = threading.Thread(target=run, args=(process_side, lambda: load_worker(str(tmp_path), {"device": "cpu"})))
    thread.start()
    status, detail = engine_side.recv()
    thread.join(timeout=30)
    assert status == "failed" and detail.startswith("Traceback (most recent call last):")
    assert str(tmp_path) in detail and raised == [1]
