"""The pipeline_parallel executor on CPU (gloo, 2 stages): embeddings and token states equal the sync executor's on
a random GQA decoder (Qwen2, biases; causal and bidirectional) over packed batches of mixed lengths with several in
flight; each stage holds its share of the weights (measured in the stage processes); models without cut points and
splits with too few layers are refused at assembly; a stage killed mid-batch fails that batch naming the stage within
seconds, and the engine refuses work after. The fast tier starts one pipeline_parallel engine (the decoder's); the
slow tier (each engine takes 12-20 s to start here) adds the packaged all-MiniLM-L6-v2, the rerankers (a Qwen3
yes/no reranker with tied embeddings, a BERT cross-encoder), AsyncEngine, ``wde serve``, tensor x pipeline
parallelism, a stage that raises and one that fails to load."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time

import numpy as np
import pytest
import torch

from wde_plugin_kit.corpus import minilm_path, wiki_paragraphs
from wde_plugin_kit.decoders import save_random_decoder, save_random_reranker
from wde_plugin_kit.encoders import save_bert_classifier, save_random_bert
from wde_core import AsyncEngine, Engine, assemble_pipeline
from wde_core.runtime.engine import BatchError
from wde_pipeline_parallel.executor import StageDiedError
from wde_pipeline_parallel.split import PipelineParallelError, StageSplit

TEXTS = [text[:8 + 29 * i] for i, text in enumerate(wiki_paragraphs(16))] + ["a"]  # mixed lengths, packed
TOL = 1e-5
PP = dict(device="cpu", executor="pipeline_parallel", pipeline_parallel_size=2, max_num_batched_tokens=256)


def save_decoder(directory):
    """Qwen2 (GQA 4/2 heads, q/k/v biases), 4 layers whose weights outweigh the embeddings, as in real decoders."""
    return save_random_decoder(directory, "qwen2", seed=3, num_hidden_layers=4, intermediate_size=512,
                               max_position_embeddings=128)


def whole_bytes(engine: Engine) -> int:
    """Parameter bytes of a sync engine's whole model."""
    return sum(p.numel() * p.element_size() for p in engine.executor.worker.model.parameters())


@pytest.fixture(scope="module")
def decoder(tmp_path_factory):
    """(sync engines per mode (causal: True/False), a causal pipeline_parallel engine) for the random decoder."""
    directory = save_decoder(tmp_path_factory.mktemp("qwen2"))
    sync = {causal: Engine(str(directory), device="cpu", enable_bidirectional=not causal, max_num_batched_tokens=256)
            for causal in (True, False)}
    with Engine(str(directory), **PP, enable_bidirectional=False) as engine:
        yield sync, engine


def test_decoder_embeddings_equal_the_sync_executor_with_batches_in_flight(decoder):
    sync, pp = decoder
    assert pp.pipeline.components["executor"].name == "pipeline_parallel" and pp.executor.max_in_flight == 4
    ours, theirs = pp.encode(TEXTS), sync[True].encode(TEXTS)
    assert ours.shape == theirs.shape and np.abs(ours - theirs).max() <= TOL
    assert all(busy > 0 for busy in pp.executor.busy_seconds())  # both stages computed


def test_token_states_equal_sync_in_both_modes_on_packed_batches(decoder):
    """Whether attention is causal travels in the batch's metadata, across the stage boundary too."""
    sync, pp = decoder
    for causal, engine in sync.items():
        batch = engine.builder.build(engine.prepare("embed_tokens", TEXTS[:10]).requests)
        assert batch.attn_metadata.causal is causal and len(set(batch.seq_lens)) > 5
        ours = pp.executor.submit(batch).result(timeout=60)["tokens"]
        theirs = engine.executor.submit(batch).result()["tokens"]
        assert ours.shape == theirs.shape == (sum(batch.seq_lens), theirs.shape[1])
        assert (ours - theirs).abs().max().item() <= TOL, causal


def test_each_stage_holds_about_half_of_the_parameters(decoder):
    sync, pp = decoder
    whole = whole_bytes(sync[True])
    held = [process.parameter_bytes for process in pp.executor.processes]  # measured in the stage processes
    print(f"qwen2 4 layers: parameter bytes per stage {held} of {whole} ({max(held) / whole:.3f}x)")
    assert len(held) == 2 and sum(held) == whole and max(held) <= 0.55 * whole
    shown = f"parameters per stage {held[0] / 2 ** 20:.2f} | {held[1] / 2 ** 20:.2f} MiB"
    assert pp.pipeline.reasons["pipeline_parallel"].startswith(f"2 stages (gloo), one process each; {shown}")


def test_the_split_is_described_at_assembly(tmp_path):
    """``wde inspect`` prints these reasons: the layers and weights of each stage, and its bytes."""
    reasons = assemble_pipeline(str(save_decoder(tmp_path)), **PP).reasons
    assert reasons["pipeline_parallel"] == ("2 stages (gloo), one process each; parameters per stage 0.97 | 0.85 MiB "
                                            "of 1.82 MiB (0.53x at most)")
    assert reasons["pp_stage_0"] == "embed_tokens, layers.0-1; 0.97 MiB"
    assert reasons["pp_stage_1"] == "layers.2-3, norm; 0.85 MiB"


def test_wde_inspect_prints_the_split(tiny_bert_dir):
    from click.testing import CliRunner

    from wde_core.cli.main import inspect

    result = CliRunner().invoke(inspect, [str(tiny_bert_dir), "--device", "cpu", "--engine-arg",
                                          "executor=pipeline_parallel", "--engine-arg", "pipeline_parallel_size=2"])
    assert result.exit_code == 0, result.output
    assert "pipeline_parallel: 2 stages (gloo), one process each; parameters per stage" in result.output
    assert "pp_stage_0: embeddings, layers.0;" in result.output and "pp_stage_1: layers.1;" in result.output


def test_layers_are_shared_out_evenly_the_first_stages_taking_the_remainder():
    split = StageSplit("layers", 7, 3, ("embed",))
    assert [list(split.layer_range(s)) for s in range(3)] == [[0, 1, 2], [3, 4], [5, 6]]
    assert split.holders("layers.4.mlp.weight") == range(1, 2) and split.holders("embed.weight") == range(0, 1)
    assert split.holders("norm.weight") == range(2, 3) and split.holders("rotary.cos", buffer=True) == range(3)


def test_fewer_layers_than_stages_are_refused_at_assembly(tiny_bert_dir):
    with pytest.raises(PipelineParallelError, match=r"BertEncoder has 2 layer\(s\) in 'layers': it cannot be cut "
                                                    r"into pipeline_parallel_size=3 stages"):
        assemble_pipeline(str(tiny_bert_dir), **{**PP, "pipeline_parallel_size": 3})


def test_a_model_without_cut_points_is_refused_by_name(tmp_path):
    """BertTokenClassifier changes BertEncoder's forward without declaring cut points for it."""
    directory = save_random_bert(tmp_path)
    config = json.loads((directory / "config.json").read_text())
    config.update(architectures=["BertForTokenClassification"], id2label={0: "O", 1: "B-PER"},
                  label2id={"O": 0, "B-PER": 1})
    (directory / "config.json").write_text(json.dumps(config))
    with pytest.raises(PipelineParallelError, match=r"model class wde_bert\.model:BertTokenClassifier \(architecture "
                                                    r"BertForTokenClassification, from wde-bert\) declares no pipeline "
                                                    r"cut points for its forward"):
        assemble_pipeline(str(directory), **PP)


def test_tensor_parallel_stages_need_a_model_class_that_supports_it(tmp_path):
    directory = save_bert_classifier(tmp_path / "reranker", num_labels=1)
    with pytest.raises(PipelineParallelError, match=r"model class wde_reranker\.models:BertCrossEncoder does not "
                                                    r"support tensor parallelism"):
        assemble_pipeline(str(directory), **PP, tensor_parallel_size=2)


def test_a_killed_stage_fails_its_batch_naming_it_and_the_engine_refuses_new_work(decoder):
    """Last for the decoder (it ends the engine): stage 1 is held, then killed, with a batch in flight."""
    sync, engine = decoder
    victim = engine.executor.processes[1]
    os.kill(victim.process.pid, signal.SIGSTOP)  # hold the batch inside the victim
    batch = engine.builder.build(engine.prepare("encode", ["held by stage 1"]).requests)
    future = engine.executor.submit(batch)
    os.kill(victim.process.pid, signal.SIGKILL)
    start = time.monotonic()
    with pytest.raises(StageDiedError, match=r"pipeline_parallel stage 1 \(pid \d+\) died with exit code -9; "
                                             r"1 batch\(es\) in flight failed"):
        future.result(timeout=30)
    assert time.monotonic() - start < 10
    assert not any(p.process.is_alive() for p in engine.executor.processes)  # stage 0 is not left sending
    assert not engine.executor.healthy()
    with pytest.raises(BatchError, match="the pipeline_parallel executor takes no more work: stage 1"):
        engine.encode(["after the death"])
    assert not engine.has_unfinished()


@pytest.mark.slow  # a second pipeline_parallel engine: the decoder's tests above keep the fast tier's end to end
def test_minilm_equals_the_sync_executor():
    path = str(minilm_path())
    with Engine(path, **PP) as pp:
        ours = pp.encode(TEXTS)
        held = [p.parameter_bytes for p in pp.executor.processes]
    with Engine(path, device="cpu", max_num_batched_tokens=256) as sync:
        theirs, whole = sync.encode(TEXTS), whole_bytes(sync)
    print(f"all-MiniLM-L6-v2: parameter bytes per stage {held} of {whole}")
    assert np.abs(ours - theirs).max() <= TOL and sum(held) == whole


@pytest.mark.slow
def test_a_tied_llm_reranker_equals_sync_and_its_last_stage_drops_the_embeddings(tmp_path):
    """Qwen3-Reranker's head is two rows of the tied embeddings: the last stage reads them while loading (the
    model's ``pipeline_tied``), cuts the rows, then holds no embeddings."""
    directory = save_random_reranker(tmp_path / "qwen3-reranker", tied=True, num_hidden_layers=3)
    query, docs = "what is a panda?", [text[:20 + 40 * i] for i, text in enumerate(wiki_paragraphs(6))]
    args = dict(task="rerank", variant="qwen3-reranker")
    with Engine(str(directory), device="cpu", max_num_batched_tokens=256, **args) as sync:
        theirs = [r["score"] for r in sync.rerank(query, docs)]
        model = sync.executor.worker.model
        whole, embedding, answer_rows = whole_bytes(sync), model.embed_tokens.weight, model.answer_rows
    with Engine(str(directory), **PP, **args) as pp:
        ours = [r["score"] for r in pp.rerank(query, docs)]
        held = [p.parameter_bytes for p in pp.executor.processes]
        assert pp.pipeline.reasons["pp_stage_1"].startswith("layers.2, norm")
    embedding_bytes, rows_bytes = embedding.numel() * embedding.element_size(), answer_rows.numel() * 4
    print(f"qwen3 reranker (3 layers): parameter bytes per stage {held} of {whole}")
    assert np.abs(np.array(ours) - np.array(theirs)).max() <= TOL
    assert held[1] < embedding_bytes <= held[0] and sum(held) == whole + rows_bytes  # the two rows on both stages


@pytest.mark.slow
def test_a_bert_cross_encoder_equals_sync(tmp_path):
    directory = save_bert_classifier(tmp_path / "reranker", num_labels=1, seed=1)
    docs = [text[:30 + 30 * i] for i, text in enumerate(wiki_paragraphs(8))]
    with Engine(str(directory), device="cpu") as sync:
        theirs = [r["score"] for r in sync.rerank("a query", docs)]
    with Engine(str(directory), **PP) as pp:
        ours = [r["score"] for r in pp.rerank("a query", docs)]
        assert pp.pipeline.reasons["pp_stage_1"].startswith("layers.1, pooler.dense, classifier")
    assert np.abs(np.array(ours) - np.array(theirs)).max() <= TOL


@pytest.mark.slow
def test_async_engine_serves_concurrent_calls_through_the_stages(tmp_path):
    directory = save_decoder(tmp_path)
    with Engine(str(directory), device="cpu", enable_bidirectional=False) as sync:
        expected = [sync.encode(TEXTS[i::4]) for i in range(4)]

    async def calls():
        engine = AsyncEngine(str(directory), **PP, enable_bidirectional=False)
        try:
            return await asyncio.gather(*(engine.encode(TEXTS[i::4]) for i in range(4)))
        finally:
            await engine.close()

    results = asyncio.run(calls())
    for ours, theirs in zip(results, expected):
        assert np.abs(ours - theirs).max() <= TOL


@pytest.mark.slow
def test_wde_serve_with_pipeline_parallel_equals_the_engine(tmp_path):
    import httpx

    from wde_plugin_kit.serve import ServeProcess

    path = str(minilm_path())
    server = ServeProcess(path, "--served-model-name", "minilm", "--engine-arg", "executor=pipeline_parallel",
                          "--engine-arg", "pipeline_parallel_size=2", log=tmp_path / "serve.log")
    try:
        answer = httpx.post(server.url + "/v1/embeddings", json={"input": TEXTS[:6], "model": "minilm"}, timeout=60)
        assert answer.status_code == 200, answer.text
        ours = np.array([item["embedding"] for item in answer.json()["data"]], dtype=np.float32)
        assert httpx.get(server.url + "/ready", timeout=10).status_code == 200
    finally:
        assert server.stop() == 0, server.log()
    with Engine(path, device="cpu") as sync:
        assert np.abs(ours - sync.encode(TEXTS[:6])).max() <= TOL


@pytest.mark.slow
def test_tensor_times_pipeline_parallel_equals_sync(tmp_path):
    """2 stages x 2 tensor-parallel ranks: four processes, each with its stage's layers' shard."""
    directory = save_decoder(tmp_path)
    with Engine(str(directory), device="cpu", enable_bidirectional=False) as sync:
        theirs, whole = sync.encode(TEXTS), whole_bytes(sync)
    with Engine(str(directory), **PP, tensor_parallel_size=2, enable_bidirectional=False) as both:
        ours = both.encode(TEXTS)
        held = [p.parameter_bytes for p in both.executor.processes]
        assert both.pipeline.reasons["pipeline_parallel"].startswith("2 stages (gloo), 2 tensor-parallel ranks each")
    print(f"qwen2 PP=2 x TP=2: parameter bytes per process {held} of {whole}")
    assert np.abs(ours - theirs).max() <= TOL and max(held) <= 0.3 * whole


@pytest.mark.slow
def test_a_stage_that_raises_stops_the_chain_instead_of_leaving_it_out_of_step(tiny_bert_dir):
    with Engine(str(tiny_bert_dir), **PP) as engine:
        future = engine.executor.submit(None)  # every stage fails before it computes
        with pytest.raises(StageDiedError, match=r"pipeline_parallel stage [01] raised AttributeError: .*; "
                                                 r"1 batch\(es\) in flight failed"):
            future.result(timeout=30)
        with pytest.raises(BatchError, match="the pipeline_parallel executor takes no more work: stage [01] raised"):
            engine.encode("after the failure")


@pytest.mark.slow
def test_a_stage_that_fails_to_load_is_reported_with_its_traceback(tmp_path):
    directory = save_random_bert(tmp_path)
    (directory / "model.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(StageDiedError, match=r"(?s)pipeline_parallel stage [01] failed while loading the model:.*"
                                             r"WeightsError: corrupted safetensors file"):
        Engine(str(directory), **PP)


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 CUDA devices")
def test_nccl_two_gpus_equal_one(tmp_path):
    directory = save_decoder(tmp_path)
    with Engine(str(directory), device="cuda", dtype="float32") as one:
        expected = one.encode(TEXTS)
    with Engine(str(directory), device="cuda", dtype="float32", executor="pipeline_parallel",
                pipeline_parallel_size=2) as two:
        assert two.pipeline.reasons["pipeline_parallel"].startswith("2 stages (nccl)")
        assert np.abs(two.encode(TEXTS) - expected).max() <= 1e-4
