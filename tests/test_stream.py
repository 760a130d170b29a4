"""``Engine.map``, the pipelined host path: chunks prepared on a tokenizer thread while the engine runs, results in
order and equal to one call each, a refused chunk's error in its place, and a closed stream leaving nothing behind."""

from __future__ import annotations

import itertools
import threading
import time

import numpy as np
import pytest

from conftest import wiki_paragraphs
from wde_core import Engine
from wde_core.runtime.stream import ChunkError


@pytest.fixture(scope="module")
def engine(tiny_st_bert_dir):
    with Engine(str(tiny_st_bert_dir), max_num_batched_tokens=256) as engine:
        yield engine


def chunks_of(texts: list[str], size: int) -> list[list[str]]:
    return [texts[i:i + size] for i in range(0, len(texts), size)]


def test_results_come_in_order_and_equal_one_call_each(engine):
    texts = wiki_paragraphs(40)
    chunks = chunks_of(texts, 7)  # chunk boundaries fall inside batches of 256 tokens
    streamed = list(engine.map("encode", chunks, normalize=False))
    assert [len(result) for result in streamed] == [len(chunk) for chunk in chunks]
    for chunk, result in zip(chunks, streamed):
        np.testing.assert_allclose(result, engine.encode(chunk, normalize=False), atol=1e-5)
    whole = engine.encode(texts, normalize=False)
    np.testing.assert_allclose(np.concatenate(streamed), whole, atol=1e-5)
    assert not engine.has_unfinished()


def test_any_method_and_single_inputs(engine):
    assert [v.shape for v in engine.map("encode", ["one text", "another"])] == [(64,), (64,)]
    tokens = list(engine.map("embed_tokens", [["a b c"], ["a b c d e"]]))
    assert [t[0].shape[0] for t in tokens] == [5, 7]  # [CLS] ... [SEP]


@pytest.mark.parametrize("errors", ["return", "raise"])
def test_a_refused_chunk_names_itself_and_the_input_and_the_others_are_served(engine, errors):
    texts = wiki_paragraphs(30)
    chunks = [texts[:10], texts[10:20], ["fine", 7, "fine"], texts[20:]]
    expected = [engine.encode(chunk) for chunk in (texts[:10], texts[10:20], texts[20:])]
    stream = engine.map("encode", chunks, errors=errors)
    assert np.allclose(next(stream), expected[0], atol=1e-5)
    assert np.allclose(next(stream), expected[1], atol=1e-5)
    with pytest.raises(RuntimeError, match="this engine is serving a map\\(\\) stream; finish or close it"):
        engine.encode("a call while the stream is open")  # its requests would take the stream's batches
    if errors == "raise":
        with pytest.raises(ChunkError, match=r"chunk 2: TypeError: input 1: field 'text' must be a str, got int"):
            next(stream)
        assert next(stream, None) is None  # the stream ended with its error
    else:
        refused = next(stream)
        assert isinstance(refused, ChunkError) and refused.index == 2 and isinstance(refused.cause, TypeError)
        assert np.allclose(next(stream), expected[2], atol=1e-5)
        assert next(stream, None) is None
    assert not engine.has_unfinished()
    assert engine.encode("still serving").shape == (64,)


def test_a_closed_stream_reads_no_further_and_leaves_no_work_or_thread(engine):
    pulled = itertools.count()

    def endless():
        for i in itertools.count():
            next(pulled)
            yield [f"text number {i} " * 20] * 8

    before = {t.name for t in threading.enumerate()}
    stream = engine.map("encode", endless(), prefetch=2)
    for _ in range(3):
        assert next(stream).shape == (8, 64)
    stream.close()
    assert next(pulled) <= 3 + 2 + 1  # what was yielded, prefetched, and at most one chunk being admitted
    assert not engine.has_unfinished()
    assert not [t for t in threading.enumerate() if t.name.startswith("wde-tokenizer") and t.name not in before]


def test_the_next_chunk_is_tokenized_while_the_engine_runs(engine, monkeypatch):
    """The overlap itself: with a slow forward, the tokenizer thread prepares chunk k+1 before chunk k's last
    batch is done (the time line of both threads is recorded, not measured against a bound)."""
    events: list[tuple[str, float]] = []
    execute, prepare = engine.executor.worker.execute, engine.prepare

    def slow_execute(model_input):
        time.sleep(0.05)
        events.append(("batch done", time.perf_counter()))
        return execute(model_input)

    def recorded_prepare(*args, **kwargs):
        events.append((f"prepare on {threading.current_thread().name}", time.perf_counter()))
        return prepare(*args, **kwargs)

    monkeypatch.setattr(engine.executor.worker, "execute", slow_execute)
    monkeypatch.setattr(engine, "prepare", recorded_prepare)
    chunks = chunks_of(wiki_paragraphs(40), 10)
    assert len(list(engine.map("encode", chunks, prefetch=1))) == 4
    prepares = [t for name, t in events if name.startswith("prepare on wde-tokenizer")]
    batches = [t for name, t in events if name == "batch done"]
    assert len(prepares) == 4 and len(batches) >= 4
    assert prepares[1] < batches[0]  # chunk 1 was being tokenized while chunk 0's first batch ran
    assert prepares[-1] < batches[-1]  # and the last chunk before the last batch was done


def test_bad_arguments_are_refused_before_any_chunk_is_read(engine):
    never = (pytest.fail("read") for _ in range(1))
    with pytest.raises(ValueError, match="errors='ignore'"):
        engine.map("encode", never, errors="ignore")
    with pytest.raises(ValueError, match="prefetch=0"):
        engine.map("encode", never, prefetch=0)
    with pytest.raises(AttributeError, match="no registered task has a method of that name"):
        engine.map("embed_everything", never)
