"""Executors and the async engine: same results as the synchronous executor, replicas that die
fail their batches with a clear error, concurrent callers share batches."""

from __future__ import annotations

import asyncio
import os
import signal
import time

import numpy as np
import pytest

import wde_bert.plugin
from conftest import wiki_paragraphs
from wde_core import Engine
from wde_core.runtime.async_engine import AsyncEngine
from wde_core.runtime.engine import BatchError
from wde_core.assembly.model_files import ModelNotFoundError
from wde_data_parallel.executor import ReplicaDiedError

TEXTS = wiki_paragraphs(60) + ["short", "a", "two words"]


@pytest.fixture(scope="module")
def expected(tiny_st_bert_dir):
    return Engine(str(tiny_st_bert_dir), device="cpu").encode(TEXTS)


@pytest.mark.parametrize("executor", ["pipelined", "data_parallel"])
def test_executors_give_the_synchronous_results(tiny_st_bert_dir, expected, executor):
    with Engine(str(tiny_st_bert_dir), device="cpu", executor=executor, max_num_batched_tokens=512) as engine:
        assert engine.pipeline.components["executor"].name == executor
        assert np.abs(engine.encode(TEXTS) - expected).max() <= 1e-6
        assert engine.encode("one more").shape == (64,)
    with pytest.raises(RuntimeError, match="is closed; build a new Engine"):
        engine.encode("after close")


@pytest.fixture
def dp_engine(tiny_st_bert_dir):
    engine = Engine(str(tiny_st_bert_dir), device="cpu", executor="data_parallel", num_replicas=2,
                    threads_per_replica=1, max_num_batched_tokens=256)
    yield engine
    engine.close()


def test_data_parallel_deals_work_by_token_load(dp_engine, expected):
    assert np.abs(dp_engine.encode(TEXTS) - expected).max() <= 1e-6
    served = [r.served_tokens for r in dp_engine.executor.replicas]
    assert min(served) > 0.3 * max(served), served


def test_data_parallel_without_its_plugin_is_refused_with_the_install_command(tiny_st_bert_dir, monkeypatch):
    from wde_core.plugins.host import PluginHost

    refused = r"no executor 'data_parallel' \(named by engine argument executor\); registered: pipelined, sync; "
    core_and_bert = PluginHost(use_entry_points=False).load(extra_plugins=[("wde-bert", wde_bert.plugin)])
    with pytest.raises(LookupError, match=refused + r"the wde-data-parallel plugin provides it: "
                                                    r"pip install wde-data-parallel$"):
        Engine(str(tiny_st_bert_dir), device="cpu", executor="data_parallel", host=core_and_bert)
    monkeypatch.setenv("WDE_PLUGINS", "wde-bert")
    left_out = PluginHost().load()
    assert "wde-data-parallel" in left_out.filtered_out.values()
    with pytest.raises(LookupError, match=refused + r"the wde-data-parallel plugin provides it, installed but left "
                                                    r"out by WDE_PLUGINS='wde-bert': add its entry point to "
                                                    r"WDE_PLUGINS$"):
        Engine(str(tiny_st_bert_dir), device="cpu", executor="data_parallel", host=left_out)


def wait_until(predicate, seconds: float = 20.0) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_a_replica_that_dies_fails_its_batches_and_the_others_carry_on(dp_engine, expected):
    executor = dp_engine.executor
    victim = executor.replicas[0]
    os.kill(victim.process.pid, signal.SIGSTOP)  # hold the batch inside the replica
    requests = dp_engine.prepare("encode", ["held by the victim"]).requests
    future = executor.submit(dp_engine.builder.build(requests))
    assert victim.pending
    os.kill(victim.process.pid, signal.SIGKILL)
    with pytest.raises(ReplicaDiedError, match=r"replica 0 \(pid \d+\) died with exit code -9; 1 batch\(es\)"):
        future.result(timeout=20)
    assert executor.problems and not victim.alive
    assert np.abs(dp_engine.encode(TEXTS) - expected).max() <= 1e-6  # the live replica serves everyone


def test_with_every_replica_dead_requests_fail_instead_of_hanging(dp_engine):
    for replica in dp_engine.executor.replicas:
        os.kill(replica.process.pid, signal.SIGKILL)
    wait_until(lambda: not any(r.alive for r in dp_engine.executor.replicas))
    with pytest.raises(BatchError, match="no live replica: replica"):
        dp_engine.encode(["nobody is left"])
    assert not dp_engine.has_unfinished()


def test_async_callers_share_batches_and_get_their_own_results(tiny_st_bert_dir, expected):
    async def scenario():
        engine = AsyncEngine(str(tiny_st_bert_dir), device="cpu")
        seen_batches = []
        build = engine.engine.builder.build
        engine.engine.builder.build = lambda batch: seen_batches.append({r.call_id for r in batch}) or build(batch)
        chunks = [TEXTS[i:i + 7] for i in range(0, len(TEXTS), 7)]
        results = await asyncio.gather(*(engine.encode(c) for c in chunks), engine.encode("single text"))
        await engine.close()
        return results, seen_batches

    results, seen_batches = asyncio.run(scenario())
    assert np.abs(np.concatenate(results[:-1]) - expected).max() <= 1e-6
    assert results[-1].shape == (64,)
    assert max(len(calls) for calls in seen_batches) > 1  # requests of several callers in one batch


def test_async_bad_input_and_failed_batches_fail_only_their_callers(tiny_st_bert_dir, expected):
    async def scenario():
        engine = AsyncEngine(str(tiny_st_bert_dir), device="cpu")
        process = engine.engine.output_processor.process

        def poisoned(batch, pooled):
            if any("POISON" in r.text for r in batch):
                raise RuntimeError("poisoned batch")
            return process(batch, pooled)

        engine.engine.output_processor.process = poisoned
        bad = await asyncio.gather(engine.encode(["fine", 3]), return_exceptions=True)
        failed = await asyncio.gather(engine.encode(["POISON"]), return_exceptions=True)
        good = await engine.encode(TEXTS)
        await engine.close()
        return bad[0], failed[0], good

    bad, failed, good = asyncio.run(scenario())
    assert isinstance(bad, TypeError) and "input 1: field 'text'" in str(bad)
    assert isinstance(failed, RuntimeError) and str(failed) == "poisoned batch"
    assert np.abs(good - expected).max() <= 1e-6


def test_results_that_cannot_be_assembled_fail_their_call_and_the_engine_serves_on(tiny_st_bert_dir, expected):
    """A call whose collect raises (after its batches ran) gets the error; it does not hang, nor stop the engine."""
    from wde_core.tasks import Call

    def broken(results):
        raise ValueError(f"cannot assemble {len(results)} results")

    async def scenario():
        engine = AsyncEngine(str(tiny_st_bert_dir), device="cpu")
        failed = await asyncio.gather(asyncio.wait_for(engine.submit(
            lambda: Call(engine.engine.prepare("encode", ["a", "b"]).requests, broken)), 60), return_exceptions=True)
        good = await engine.encode(TEXTS)
        await engine.close()
        return failed[0], good

    failed, good = asyncio.run(scenario())
    assert isinstance(failed, ValueError) and str(failed) == "cannot assemble 2 results"
    assert np.abs(good - expected).max() <= 1e-6


def test_every_forward_runs_on_the_engine_thread_and_inline_calls_tokenize_on_the_loop(tiny_st_bert_dir, expected):
    # torch ops on a second thread would start a second OpenMP team, which slows a lone request (see AsyncEngine)
    import threading
    from functools import partial

    async def scenario():
        engine = AsyncEngine(str(tiny_st_bert_dir), device="cpu")
        batches, prepared = [], []
        engine.engine.batch_listeners.append(lambda batch: batches.append(threading.current_thread().name))

        def prepare(texts):
            prepared.append(threading.current_thread().name)
            return engine.engine.prepare("encode", texts)

        alone = await engine.submit(partial(prepare, ["short"]), inline=True)
        queued = await engine.submit(partial(prepare, ["short"]))
        together = await asyncio.gather(*(engine.submit(partial(prepare, [t]), inline=True) for t in TEXTS[:6]))
        process = engine.engine.output_processor.process
        engine.engine.output_processor.process = lambda batch, pooled: (_ for _ in ()).throw(RuntimeError("boom"))
        failed = await asyncio.gather(engine.submit(partial(prepare, ["x"]), inline=True), return_exceptions=True)
        engine.engine.output_processor.process = process
        after = await engine.submit(partial(prepare, TEXTS), inline=True)
        await engine.close()
        return batches, prepared, alone, queued, together, failed[0], after

    batches, prepared, alone, queued, together, failed, after = asyncio.run(scenario())
    assert set(batches) == {"wde-engine"} and len(batches) < 1 + 1 + 6 + 1 + 1  # the six together share batches
    assert prepared[0] == "MainThread" and prepared[1].startswith("wde-tokenizer")
    assert set(prepared[2:]) == {"MainThread"}
    assert np.array_equal(alone, queued) and np.abs(alone - expected[-3]).max() <= 1e-6
    assert np.abs(np.concatenate(together) - expected[:6]).max() <= 1e-6
    assert isinstance(failed, RuntimeError) and str(failed) == "boom"
    assert np.abs(after - expected).max() <= 1e-6


def test_an_engine_that_fails_to_build_raises_in_the_caller(tmp_path):
    # the engine is built on its own thread; its error still reaches the constructor's caller, as Engine's does
    with pytest.raises(ModelNotFoundError, match=r"model '.*missing' is neither a directory nor a valid hub id"):
        AsyncEngine(str(tmp_path / "missing"), device="cpu")


class LaunchingWorker:
    """A stand-in worker with ``launch``: records when a batch is started and when its results are waited for."""

    def __init__(self) -> None:
        self.events: list[str] = []

    def load_model(self) -> None:
        self.events.append("loaded")

    def launch(self, model_input):
        self.events.append(f"launch {model_input}")
        if model_input == "bad launch":
            raise ValueError("refused at launch")

        def wait():
            self.events.append(f"wait {model_input}")
            if model_input == "bad run":
                raise RuntimeError("failed on the device")
            return {"dense": model_input}
        return wait


def test_sync_executor_on_cuda_launches_and_waits_only_when_asked():
    """On CUDA the sync executor starts a batch and returns (two in flight); the result, or the batch's error, is
    waited for once, when the engine asks; a worker without ``launch`` (a plugin's) is run as before."""
    from types import SimpleNamespace

    import torch

    from wde_core.stages.executor import SyncExecutor

    worker = LaunchingWorker()
    executor = SyncExecutor(SimpleNamespace(device=torch.device("cuda")), lambda: worker)
    assert executor.max_in_flight == 2
    first, second = executor.submit("a"), executor.submit("b")
    assert worker.events == ["loaded", "launch a", "launch b"]  # nothing waited for yet
    assert first.result() == {"dense": "a"} and first.result() == {"dense": "a"}
    assert worker.events[-1] == "wait a" and worker.events.count("wait a") == 1
    assert second.exception() is None and worker.events[-1] == "wait b"
    failed = executor.submit("bad run")
    assert isinstance(failed.exception(), RuntimeError)
    with pytest.raises(RuntimeError, match="failed on the device"):
        failed.result()
    with pytest.raises(ValueError, match="refused at launch"):
        executor.submit("bad launch").result()
    on_cpu = SyncExecutor(SimpleNamespace(device=torch.device("cpu")), LaunchingWorker)
    assert on_cpu.max_in_flight == 1 and not on_cpu.launches
