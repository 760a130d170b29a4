"""Fair scheduling and cancellation: the scheduler takes turns of a quantum of tokens between tenants and
calls (one call batches exactly as first come, first served did), and a cancelled ``AsyncEngine`` caller's
work is dropped."""

from __future__ import annotations

import asyncio
import random
import threading
from collections import deque
from functools import partial
from types import SimpleNamespace

import numpy as np
import pytest

from conftest import wiki_paragraphs
from wde_core import AsyncEngine, Engine
from wde_core.attention.sdpa import SdpaAttention
from wde_core.stages.request import Request
from wde_core.stages.scheduler import CALL_QUANTUM, TENANT_QUANTUM, TokenBudgetScheduler
from wde_core.tasks import Call


def scheduler(max_tokens: int, max_seqs: int = 256, *, causal: bool = False) -> TokenBudgetScheduler:
    """A scheduler for a pipeline with an SDPA backend (shared prefixes count once where ``causal``)."""
    backend = SimpleNamespace(load=lambda: SdpaAttention)
    return TokenBudgetScheduler(SimpleNamespace(args=SimpleNamespace(max_num_batched_tokens=max_tokens,
                                                                     max_num_seqs=max_seqs),
                                                settings=SimpleNamespace(causal=causal, pooling="last"),
                                                components={"attention_backend": backend}))


def requests(lengths, *, call_id=None, tenant=None) -> list[Request]:
    return [Request(i, f"{call_id}:{i}", token_ids=[0] * n, call_id=call_id, tenant=tenant)
            for i, n in enumerate(lengths)]


def drain(s: TokenBudgetScheduler) -> list[list[Request]]:
    batches = []
    while s.has_waiting():
        batches.append(s.schedule())
    return batches


def fifo_batches(adds, max_tokens: int, max_seqs: int) -> list[list[Request]]:
    """What the first-come-first-served scheduler formed: each add longest first, then batches in order."""
    waiting = deque(r for add in adds for r in sorted(add, key=lambda r: -r.num_tokens))
    batches = []
    while waiting:
        batch, tokens = [], 0
        while waiting and len(batch) < max_seqs and not (batch and tokens + waiting[0].num_tokens > max_tokens):
            tokens += waiting[0].num_tokens
            batch.append(waiting.popleft())
        batches.append(sorted(batch, key=lambda r: -r.num_tokens))
    return batches


@pytest.mark.parametrize("seed", range(6))
def test_one_call_is_batched_exactly_as_first_come_first_served(seed):
    # the synchronous Engine.run path: every request has call_id None (also over several adds)
    rng = random.Random(seed)
    max_tokens, max_seqs = rng.choice([64, 100, 512]), rng.choice([1, 3, 8, 256])
    adds = [requests([rng.randint(1, max_tokens) for _ in range(rng.randint(1, 60))]) for _ in range(rng.randint(1, 3))]
    s = scheduler(max_tokens, max_seqs)
    for add in adds:
        s.add(add)
    assert s.num_waiting() == sum(map(len, adds))
    got = drain(s)
    assert [[id(r) for r in b] for b in got] == [[id(r) for r in b] for b in fifo_batches(adds, max_tokens, max_seqs)]
    assert s.num_waiting() == 0 and s.schedule() == []


def test_calls_take_turns_of_a_quantum_of_tokens():
    s = scheduler(10_000, max_seqs=5)  # CALL_QUANTUM-token requests: one request a turn
    s.add(requests([CALL_QUANTUM] * 6, call_id=0))
    s.add(requests([CALL_QUANTUM] * 6, call_id=1))
    s.add(requests([CALL_QUANTUM] * 6, call_id=2))
    assert [r.call_id for r in s.schedule()] == [0, 1, 2, 0, 1]  # equal lengths: the sort keeps the turns
    assert [r.call_id for r in s.schedule()] == [2, 0, 1, 2, 0]


def test_calls_not_served_yet_go_smallest_first():
    s = scheduler(10_000, max_seqs=4)
    s.add(requests([CALL_QUANTUM] * 8, call_id=0))
    s.add(requests([CALL_QUANTUM] * 3, call_id=1))
    s.add(requests([2], call_id=2))
    s.add(requests([CALL_QUANTUM] * 3, call_id=3))  # as big as call 1: after it
    assert sorted(r.call_id for r in s.schedule()) == [0, 1, 2, 3]
    assert [r.call_id for r in s.schedule()][:2] == [1, 3]  # then turns as usual
    s.add(requests([2], call_id=4))  # ahead of every call served already
    assert [r.call_id for r in s.schedule()][-1] == 4


def test_tenants_take_turns_then_their_calls():
    s = scheduler(100_000, max_seqs=8)  # TENANT_QUANTUM-token requests: one request a turn
    for call_id in (0, 1, 2):  # tenant "a" sends three calls, "b" one, the anonymous tenant one
        s.add(requests([TENANT_QUANTUM] * 4, call_id=call_id, tenant="a"))
    s.add(requests([TENANT_QUANTUM] * 4, call_id=3, tenant="b"))
    s.add(requests([TENANT_QUANTUM] * 4, call_id=4))
    batch = s.schedule()
    assert [(r.tenant, r.call_id) for r in batch] == [("a", 0), ("b", 3), (None, 4), ("a", 1), ("b", 3),
                                                      (None, 4), ("a", 2), ("b", 3)]


def test_a_tenant_of_many_short_requests_gets_its_share_of_tokens_not_of_requests():
    s = scheduler(4 * TENANT_QUANTUM)
    s.add(requests([TENANT_QUANTUM] * 8, call_id=0, tenant="bulk"))
    s.add(requests([8] * 400, call_id=1, tenant="interactive"))
    batch = s.schedule()
    tokens = {tenant: sum(r.num_tokens for r in batch if r.tenant == tenant) for tenant in ("bulk", "interactive")}
    assert tokens == {"bulk": 2 * TENANT_QUANTUM, "interactive": 2 * TENANT_QUANTUM}  # one request a turn: 16 tokens


def test_a_new_call_joins_the_very_next_batch_while_big_calls_are_queued():
    s = scheduler(1000, max_seqs=8)
    for call_id in range(3):
        s.add(requests([500] * 10, call_id=call_id))
    # two 500-token requests fill a batch; first come, first served would run all 30 before anything added now
    assert [[r.call_id for r in s.schedule()] for _ in range(2)] == [[0, 1], [2, 0]]
    s.add(requests([2, 2], call_id=9))  # not served yet: ahead of every call already served
    assert [[r.call_id for r in s.schedule()] for _ in range(2)] == [[1, 9, 9], [2, 0]]
    assert s.num_waiting() == 30 - 7 and all(r.call_id != 9 for b in drain(s) for r in b)


def test_a_new_call_never_cuts_into_the_turn_under_way():
    s = scheduler(1000, max_seqs=1)  # one request a batch
    s.add(requests([100] * 5, call_id=0))
    assert [[r.call_id for r in s.schedule()] for _ in range(3)] == [[0], [0], [0]]  # a turn, then 100 of the next
    s.add(requests([10], call_id=1))  # after the 28 tokens left of call 0's turn, ahead of its next turn
    assert [[r.call_id for r in s.schedule()] for _ in range(3)] == [[0], [1], [0]]


def test_calls_not_served_yet_keep_their_arrival_order():
    s = scheduler(200, max_seqs=8)  # one 200-token request a batch
    s.add(requests([200] * 3, call_id=0))
    assert [r.call_id for r in s.schedule()] == [0]
    for call_id in (1, 2, 3):
        s.add(requests([200], call_id=call_id))
    assert [r.call_id for b in drain(s) for r in b] == [1, 2, 3, 0, 0]


def test_batches_stay_within_bounds_and_each_call_keeps_its_order():
    rng = random.Random(7)
    s = scheduler(300, max_seqs=6)
    added, batches = {}, []
    for call_id in range(12):
        add = requests([rng.randint(1, 300) for _ in range(rng.randint(1, 25))], call_id=call_id,
                       tenant=rng.choice(["a", "b", None]))
        added[call_id] = sorted(add, key=lambda r: -r.num_tokens)
        s.add(add)
        if call_id % 3 == 2:
            batches.append(s.schedule())  # some batches formed while calls keep arriving
    batches += drain(s)
    assert all(0 < len(b) <= 6 and sum(r.num_tokens for r in b) <= 300 for b in batches)
    assert all([r.num_tokens for r in b] == sorted((r.num_tokens for r in b), reverse=True) for b in batches)
    order = [r for b in batches for r in b]
    assert sorted(map(id, order)) == sorted(id(r) for add in added.values() for r in add)  # each exactly once
    for call_id, add in added.items():
        assert [r.num_tokens for r in order if r.call_id == call_id] == [r.num_tokens for r in add]


def test_drop_removes_only_that_calls_waiting_requests():
    s = scheduler(5000, max_seqs=2)  # TENANT_QUANTUM-token requests: one a turn
    s.add(requests([TENANT_QUANTUM] * 4, call_id=0, tenant="a"))
    s.add(requests([TENANT_QUANTUM] * 3, call_id=1, tenant="b"))
    s.add(requests([TENANT_QUANTUM] * 2, call_id=2, tenant="a"))
    assert [r.call_id for r in s.schedule()] == [2, 1]  # tenant "a"'s smaller call first
    assert s.drop(1) == 2 and s.drop(1) == 0 and s.drop(42) == 0
    assert s.num_waiting() == 5
    assert [r.call_id for b in drain(s) for r in b] == [0, 2, 0, 0, 0]  # tenant "a" alone, its calls in turn
    s.add(requests([5], call_id=3, tenant="c"))
    assert s.drop(3) == 1 and not s.has_waiting() and s.num_waiting() == 0 and s.schedule() == []


def test_a_request_over_the_token_budget_is_refused_and_nothing_is_queued():
    s = scheduler(10)
    with pytest.raises(ValueError, match="input 1: 11 tokens exceed max_num_batched_tokens=10"):
        s.add(requests([3, 11], call_id=0))
    assert not s.has_waiting()


# --- AsyncEngine: a real (random-weight) BERT --------------------------------------------------------------
LONG = wiki_paragraphs(24)
SHORT = ["tiny call", "two"]


@pytest.fixture(scope="module")
def sync_engine(tiny_st_bert_dir):
    with Engine(str(tiny_st_bert_dir), device="cpu") as engine:
        yield engine


def test_a_small_call_submitted_after_big_ones_finishes_first(tiny_st_bert_dir, sync_engine):
    async def scenario():
        engine = AsyncEngine(str(tiny_st_bert_dir), device="cpu", max_num_batched_tokens=256)
        tenants = set()
        engine.engine.batch_listeners.append(lambda batch: tenants.update(r.tenant for r in batch))
        done: list[str] = []

        async def tracked(name, texts, tenant=None):
            result = await engine.submit(partial(engine.engine.prepare, "encode", texts), tenant=tenant)
            done.append(name)
            return result

        big = [asyncio.create_task(tracked(f"big{i}", LONG, tenant="bulk" if i == 0 else None)) for i in range(4)]
        small = asyncio.create_task(tracked("small", SHORT))  # prepared after the big ones (one tokenizer thread)
        results = await asyncio.gather(small, *big)
        await engine.close()
        return done, results, tenants

    done, results, tenants = asyncio.run(scenario())
    assert done[0] == "small" and sorted(done[1:]) == [f"big{i}" for i in range(4)]
    assert tenants == {"bulk", None}
    assert np.abs(results[0] - sync_engine.encode(SHORT)).max() <= 1e-5
    expected = sync_engine.encode(LONG)
    assert all(np.abs(r - expected).max() <= 1e-5 for r in results[1:])


def test_a_cancelled_call_is_dropped_and_the_engine_serves_on(tiny_st_bert_dir, sync_engine):
    async def scenario():
        engine = AsyncEngine(str(tiny_st_bert_dir), device="cpu", max_num_batched_tokens=256)
        formed, collected = [], []
        started, release = threading.Event(), threading.Event()

        def hold_first_batch(batch):  # on the engine thread: the big call waits in the queue until cancelled
            formed.extend(r.call_id for r in batch)
            started.set()
            release.wait(30)

        def prepare_big():
            call = engine.engine.prepare("encode", LONG * 3)
            return Call(call.requests, lambda results: collected.append(results) or call.collect(results))

        engine.engine.batch_listeners.append(hold_first_batch)
        task = asyncio.create_task(engine.submit(prepare_big))
        while not started.is_set():
            await asyncio.sleep(0.005)
        task.cancel()
        outcome = await asyncio.gather(task, return_exceptions=True)
        release.set()
        after = await engine.encode(LONG)
        alive = engine.is_alive()
        await engine.close()
        return outcome[0], formed, collected, after, alive, engine.cancelled_requests

    outcome, formed, collected, after, alive, cancelled = asyncio.run(scenario())
    assert isinstance(outcome, asyncio.CancelledError)
    big_formed = formed.count(0)  # the big call was call 0; the later encode is call 1
    assert 0 < big_formed < 3 * len(LONG) and cancelled == 3 * len(LONG) - big_formed
    assert collected == []  # its collect never ran
    assert alive and np.abs(after - sync_engine.encode(LONG)).max() <= 1e-5


def test_a_call_cancelled_before_its_prepare_starts_never_runs_it(tiny_st_bert_dir):
    async def scenario():
        engine = AsyncEngine(str(tiny_st_bert_dir), device="cpu")
        busy, ran = threading.Event(), []

        def blocking_prepare():
            busy.wait(30)
            return engine.engine.prepare("encode", SHORT)

        def recorded_prepare():
            ran.append(True)
            return engine.engine.prepare("encode", SHORT)

        first = asyncio.create_task(engine.submit(blocking_prepare))
        second = asyncio.create_task(engine.submit(recorded_prepare))
        await asyncio.sleep(0.05)  # both wait on the one tokenizer thread: the first runs, the second is queued
        second.cancel()
        outcome = await asyncio.gather(second, return_exceptions=True)
        busy.set()
        result = await first
        await asyncio.sleep(0.05)
        await engine.close()
        return outcome[0], ran, result, engine.cancelled_requests

    outcome, ran, result, cancelled = asyncio.run(scenario())
    assert isinstance(outcome, asyncio.CancelledError) and ran == [] and cancelled == 0
    assert result.shape == (2, 64)


def shared_requests(prefix: int, own: list[int], key: str = "q", *, call_id=None) -> list[Request]:
    """Requests of one shared-prefix group: ``prefix`` common tokens, then ``own[i]`` tokens of their own."""
    return [Request(i, (key, str(i)), token_ids=list(range(prefix)) + [1000 + i] * n, call_id=call_id,
                    shared_prefix=key) for i, n in enumerate(own)]


def test_a_shared_prefix_counts_once_against_the_token_budget():
    group = shared_requests(80, [20] * 10)  # 100 tokens each; packed: 80 + 10 * 20 = 280
    s = scheduler(300, causal=True)
    s.add(group)
    assert [len(b) for b in drain(s)] == [10]
    s = scheduler(300)  # a bidirectional model shares nothing: 3 requests a batch
    s.add(shared_requests(80, [20] * 10))
    assert [len(b) for b in drain(s)] == [3, 3, 3, 1]


def test_the_budget_follows_the_prefix_all_members_share():
    s = scheduler(200, causal=True)
    diverging = shared_requests(80, [20] * 3) + [Request(3, ("q", "3"), token_ids=list(range(30)) + [7] * 70,
                                                         shared_prefix="q")]
    s.add(diverging)  # with the last one the group shares 30 tokens: 100 + 70 + 70 + 70 > 200
    assert [len(b) for b in drain(s)] == [3, 1]


def test_an_image_inputs_vision_tokens_count_against_the_budget():
    pages = [Request(i, None, token_ids=[0] * 270, vision_tokens=1000) for i in range(5)]  # 1,270 tokens of work each
    s = scheduler(3000)
    s.add(pages)
    assert [len(b) for b in drain(s)] == [2, 2, 1]
    s = scheduler(1000)  # a page over the budget still runs, alone
    s.add([Request(i, None, token_ids=[0] * 270, vision_tokens=1000) for i in range(2)])
    assert [len(b) for b in drain(s)] == [1, 1]


@pytest.mark.parametrize("seed", range(8))
def test_turns_taken_in_bulk_form_the_batches_of_turns_taken_request_by_request(seed):
    """schedule() takes each turn's requests in one pass; the request-by-request loop (kept for shared prefixes,
    here with sharing off) is the reference: the same batches, in the same order, for mixed tenants and calls
    added between batches."""
    rng = random.Random(seed)
    max_tokens, max_seqs = rng.choice([64, 300, 1000]), rng.choice([3, 256])
    bulk, reference = scheduler(max_tokens, max_seqs), scheduler(max_tokens, max_seqs)
    formed: dict[str, list[list[str]]] = {"bulk": [], "reference": []}
    for step in range(14):
        if step < 9:
            lengths = [rng.randint(1, 60) for _ in range(rng.randint(1, 30))]
            tenant, call = rng.choice(["a", "b", None]), rng.randint(0, 4) if rng.random() < 0.8 else 10 + step
            for s in (bulk, reference):
                s.add([Request(i, f"{step}:{i}", token_ids=[0] * n, call_id=call, tenant=tenant)
                       for i, n in enumerate(lengths)])
        for name, schedule in (("bulk", bulk.schedule), ("reference", reference._schedule_sharing)):
            formed[name].append([r.text for r in schedule()])
    while bulk.has_waiting() or reference.has_waiting():
        formed["bulk"].append([r.text for r in bulk.schedule()])
        formed["reference"].append([r.text for r in reference._schedule_sharing()])
    assert formed["bulk"] == formed["reference"]
    assert sum(map(len, formed["bulk"])) > 0
