"""The task table: both front ends made from it, a plugin's own task, ``token_embed`` against HF's last
hidden states, chunked long inputs against chunks embedded one by one, and task refusals."""

from __future__ import annotations

import asyncio
import inspect
import shutil

import numpy as np
import pytest
import torch
from transformers import AutoTokenizer, BertModel

from conftest import save_random_xlmr
from wde_core import AsyncEngine, Engine
from wde_core.builtin import TASKS
from wde_core.plugins.entries import import_target
from wde_core.runtime.front_end import TaskMethods
from wde_core.plugin_api import Call, Task, TokenEmbedOptions, hookimpl
from wde_data_parallel.executor import ReplicaDiedError
from wde_plugin_kit import assert_matches_hf, plugin_host

TEXTS = ["The cat sat on the mat.", "a", "Embeddings map text to vectors of numbers, one per input.",
         "short text", "Retrieval " * 40]
LONG = ["Chunked processing keeps every token of a long passage in play. " * 12,
        "A second long input, about search and ranking, repeated to run past the limit. " * 7,
        "short enough to fit"]


def count_tokens(engine, texts, *, scale: int = 1):
    """Token counts of ``texts`` (times ``scale``), with the pooled vector's L2 norm: a plugin's task."""
    requests = engine.input_processor.process(texts, options=TokenEmbedOptions())
    engine.tokenizer.tokenize(requests, truncate=True)
    counts = [r.num_tokens * scale for r in requests]
    return Call(requests, lambda results: [(n, float(np.linalg.norm(v[0]))) for n, v in zip(counts, results)])


class CountingPlugin:
    """Registers the ``count`` task with the ``count_tokens`` front-end method, served by embedders."""

    @staticmethod
    @hookimpl
    def wde_register_tasks(register):
        register(Task("count", {"count_tokens": "test_tasks:count_tokens"}, inputs="a list of str",
                      served_by=("embed",)))


def test_the_core_tasks_methods_are_real_and_match_the_task_table():
    methods = {name: target for task in TASKS for name, target in task.methods.items()}
    assert set(methods) == {"encode", "embed_tokens", "score", "rerank", "classify", "classify_tokens"}
    for name, target in methods.items():
        method = getattr(TaskMethods, name)
        assert getattr(Engine, name) is method and getattr(AsyncEngine, name) is method  # one definition, two engines
        ours, prepare = inspect.signature(method).parameters, inspect.signature(import_target(target)).parameters
        assert list(ours.values())[1:-1] == list(prepare.values())[1:], name  # less self / engine and show_progress
        assert (ours["show_progress"].kind, ours["show_progress"].default) == (inspect.Parameter.KEYWORD_ONLY, False)
        assert method.__doc__ == import_target(target).__doc__ and method.__name__ == name  # written once, in tasks/


def test_async_front_ends_await_and_refuse_a_progress_bar(tiny_bert_dir):
    async def run():
        engine = AsyncEngine(str(tiny_bert_dir), device="cpu")
        try:
            with pytest.raises(TypeError, match="show_progress=True: AsyncEngine"):
                await engine.encode(TEXTS, show_progress=True)
            return await engine.encode(TEXTS, normalize=True)
        finally:
            await engine.close()

    expected = Engine(str(tiny_bert_dir), device="cpu").encode(TEXTS, normalize=True)
    assert np.abs(asyncio.run(run()) - expected).max() <= 1e-6


def test_a_plugins_task_gets_front_ends_from_the_task_table(tiny_bert_dir):
    with plugin_host(("counting", CountingPlugin)):
        engine = Engine(str(tiny_bert_dir), device="cpu")
        assert "count_tokens" in dir(engine) and engine.count_tokens.__doc__ == count_tokens.__doc__
        assert list(inspect.signature(engine.count_tokens).parameters) == ["texts", "scale", "show_progress"]
        expected = [len(AutoTokenizer.from_pretrained(tiny_bert_dir)(t)["input_ids"]) * 2 for t in TEXTS]
        counted = engine.count_tokens(TEXTS, scale=2)
        assert [n for n, _ in counted] == expected and all(norm > 0 for _, norm in counted)

        async def both():
            async_engine = AsyncEngine(str(tiny_bert_dir), device="cpu")
            try:
                return await asyncio.gather(async_engine.count_tokens(TEXTS, scale=2), async_engine.encode(TEXTS))
            finally:
                await async_engine.close()

        counted_async, vectors = asyncio.run(both())
        assert [n for n, _ in counted_async] == expected
        assert np.allclose([v for _, v in counted_async], [v for _, v in counted], atol=1e-5)
        assert np.abs(vectors - engine.encode(TEXTS)).max() <= 1e-6
        with pytest.raises(AttributeError, match="no registered task has a method of that name"):
            engine.summarize(TEXTS)


def test_a_task_refuses_a_model_it_does_not_serve(tiny_bert_dir):
    engine = Engine(str(tiny_bert_dir), device="cpu")
    # the core's two methods, then those of installed plugins' tasks served by embed models (wde-clip's similarity,
    # wde-late-interaction's multi_vector_scores and multi_vector_rerank)
    with pytest.raises(TypeError, match=r"score\(\) serves the 'rerank' task, but model .* is served for the "
                                        r"'embed' task; use encode\(\)(, | and )embed_tokens\(\)"
                                        r"(, \w+\(\))*( and \w+\(\))?$"):
        engine.score([("q", "d")])


@pytest.mark.parametrize("backend", ["torch_sdpa", "eager"])
def test_token_embed_matches_hf_last_hidden_states(tiny_bert_dir, tmp_path, backend):
    bert = assert_matches_hf(tiny_bert_dir, TEXTS, attention_backends=(backend,))
    xlmr_dir = save_random_xlmr(tmp_path / "xlmr", seed=5, hidden_size=64, num_attention_heads=4, num_hidden_layers=2,
                                intermediate_size=128, max_position_embeddings=50)
    xlmr = assert_matches_hf(xlmr_dir, TEXTS, attention_backends=(backend,))
    assert bert[backend]["token_states"] <= 1e-4 and xlmr[backend]["token_states"] <= 1e-4


def test_token_vectors_normalized_per_token(tiny_bert_dir):
    engine = Engine(str(tiny_bert_dir), device="cpu")
    raw, unit = engine.embed_tokens(TEXTS), engine.embed_tokens(TEXTS, normalize=True)
    single = engine.embed_tokens("a")
    tokenizer = AutoTokenizer.from_pretrained(tiny_bert_dir)
    assert [r.shape[0] for r in raw] == [len(tokenizer(t)["input_ids"]) for t in TEXTS]
    assert single.shape == raw[1].shape and np.abs(single - raw[1]).max() <= 1e-6
    for r, u in zip(raw, unit):
        assert u.dtype == np.float32 and np.abs(np.linalg.norm(u, axis=1) - 1).max() <= 1e-5
        assert np.abs(u - r / np.linalg.norm(r, axis=1, keepdims=True)).max() <= 1e-6
    with pytest.raises(ValueError, match="chunked long inputs serve the embed task only"):
        engine.embed_tokens(TEXTS, truncate="chunk")


def reference_chunked(directory, texts, max_len, *, pooling, normalize, dimensions=None) -> np.ndarray:
    """Each text's content tokens split into pieces of ``max_len - 2``, each wrapped in [CLS] ... [SEP],
    run one by one through HF ``BertModel``, pooled, then the token-count-weighted mean, normalized."""
    tokenizer = AutoTokenizer.from_pretrained(directory)
    model = BertModel.from_pretrained(directory, attn_implementation="eager").eval()
    out = []
    for text in texts:
        body = tokenizer(text, add_special_tokens=False)["input_ids"]
        pieces = [[tokenizer.cls_token_id, *body[i:i + max_len - 2], tokenizer.sep_token_id]
                  for i in range(0, len(body), max_len - 2)]
        vectors = []
        for ids in pieces:
            with torch.no_grad():
                states = model(torch.tensor([ids])).last_hidden_state[0].double().numpy()
            vectors.append(states.mean(0) if pooling == "mean" else states[0])
        weights = np.array([len(ids) for ids in pieces], dtype=np.float64)
        merged = (weights[:, None] * np.stack(vectors)).sum(0) / weights.sum()
        merged = merged[:dimensions] if dimensions else merged
        out.append(merged / np.linalg.norm(merged) if normalize else merged)
    return np.stack(out)


def test_chunked_long_inputs_are_the_weighted_mean_of_their_chunks(tiny_st_bert_dir, tiny_bert_dir):
    mean_engine = Engine(str(tiny_st_bert_dir), device="cpu", max_model_len=24)  # mean pooling, normalized
    got = mean_engine.encode(LONG, truncate="chunk")
    expected = reference_chunked(tiny_st_bert_dir, LONG, 24, pooling="mean", normalize=True)
    assert np.abs(got - expected).max() <= 1e-5
    cut = mean_engine.encode(LONG[:1], dimensions=16, truncate="chunk")
    assert np.abs(cut - reference_chunked(tiny_st_bert_dir, LONG[:1], 24, pooling="mean", normalize=True,
                                          dimensions=16)).max() <= 1e-5
    cls_engine = Engine(str(tiny_bert_dir), device="cpu", max_model_len=20, long_inputs="chunk")  # CLS, raw
    expected_cls = reference_chunked(tiny_bert_dir, LONG, 20, pooling="cls", normalize=False)
    assert np.abs(cls_engine.encode(LONG) - expected_cls).max() <= 1e-4
    assert np.abs(cls_engine.encode(LONG[2]) - cls_engine.encode(LONG[2], truncate=True)).max() <= 1e-6
    assert np.abs(cls_engine.encode(LONG, truncate=True) - expected_cls).max() > 1e-3  # cutting differs
    with pytest.raises(ValueError, match="input 0: field 'text' has"):
        cls_engine.encode(LONG, truncate=False)
    as_dict = cls_engine.encode(LONG, output=("dense",))
    assert set(as_dict) == {"dense"} and np.abs(as_dict["dense"] - expected_cls).max() <= 1e-4

    async def chunked_async():
        engine = AsyncEngine(str(tiny_bert_dir), device="cpu", max_model_len=20)
        try:
            return await engine.encode(LONG, truncate="chunk")
        finally:
            await engine.close()

    assert np.abs(asyncio.run(chunked_async()) - expected_cls).max() <= 1e-4


def test_settings_name_their_true_source(tiny_bert_dir):
    reasons = Engine(str(tiny_bert_dir), device="cpu").pipeline.reasons
    assert reasons["causal"] == "bidirectional attention: core default"  # wde-bert says nothing about it
    assert reasons["pooling"] == "default of wde-bert" and reasons["position_offset"] == "core default"


def test_a_replica_that_fails_to_load_shows_its_traceback(tiny_bert_dir, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(tiny_bert_dir, broken)
    (broken / "model.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(ReplicaDiedError) as info:
        Engine(str(broken), device="cpu", executor="data_parallel", num_replicas=1, threads_per_replica=1)
    message = str(info.value)
    assert "replica 0 failed while loading the model" in message and "Traceback (most recent call last)" in message
    assert "WeightsError: corrupted safetensors file" in message
