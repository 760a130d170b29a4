"""The tensor_parallel executor on CPU (gloo, 2 ranks): embeddings and token states equal the sync executor's on
random Qwen2 (GQA, biases), Llama, Mistral, Qwen3 and BERT, causal and bidirectional, packed mixed lengths; each rank
holds about half the parameters; models without TP support and heads that 2 does not divide are refused at
assembly; a rank killed mid-batch fails that batch naming the rank and the engine then refuses work."""

from __future__ import annotations

import json
import os
import signal

import numpy as np
import pytest
import torch

from wde_plugin_kit.corpus import wiki_paragraphs
from wde_plugin_kit.decoders import DECODER_VOCAB, save_random_decoder, write_decoder_tokenizer
from wde_plugin_kit.encoders import save_random_bert
from wde_core import Engine, assemble_pipeline
from wde_core.runtime.engine import BatchError
from wde_tensor_parallel.executor import RankDiedError
from wde_tensor_parallel.sharding import TensorParallelError

TEXTS = [text[:8 + 29 * i] for i, text in enumerate(wiki_paragraphs(12))] + ["a"]  # mixed lengths, packed
TOL = 1e-5
TP = dict(device="cpu", executor="tensor_parallel", tensor_parallel_size=2, max_num_batched_tokens=512)
# family -> (saver, overrides): Mistral's single key/value head cannot be split, so two here
MODELS = {"qwen2": {}, "llama": {}, "mistral": {"num_key_value_heads": 2}, "qwen3": {}, "bert": {}}
SLOW = {"llama", "mistral", "qwen3", "bert"}  # 12-18 s each to start here; Qwen2 (GQA, biases) alone keeps the fast tier ~25 s


def save_random_qwen3(directory, *, seed: int, **overrides):
    """A random-weight Qwen3Model (GQA, head_dim 32; norm weights random too) with the tiny decoder tokenizer."""
    import transformers

    config = dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=32, intermediate_size=96,
                  vocab_size=DECODER_VOCAB, num_hidden_layers=2, tie_word_embeddings=False, **overrides)
    torch.manual_seed(seed)
    model = transformers.Qwen3Model(transformers.Qwen3Config(**config)).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith(("norm.weight", ".bias")):
                param.add_(torch.randn_like(param) * 0.1)
    model.save_pretrained(directory)
    write_decoder_tokenizer(directory)
    return directory


def save(directory, family: str, **overrides):
    if family == "bert":
        return save_random_bert(directory, seed=2, st_files=True, **overrides)
    if family == "qwen3":  # per-head q/k norms, head_dim 32 (not hidden / heads)
        return save_random_qwen3(directory, seed=5, max_position_embeddings=128, **overrides)
    return save_random_decoder(directory, family, seed=3, max_position_embeddings=128,
                               **{**MODELS[family], **overrides})


def sync_engines(directory, family: str) -> dict[bool, Engine]:
    """Sync engines per mode (causal: True/False); BERT is only bidirectional."""
    if family == "bert":
        return {False: Engine(str(directory), device="cpu", max_num_batched_tokens=512)}
    return {causal: Engine(str(directory), device="cpu", enable_bidirectional=not causal, max_num_batched_tokens=512)
            for causal in (True, False)}


@pytest.fixture(scope="module", params=[pytest.param(family, marks=[pytest.mark.slow] if family in SLOW else [])
                                        for family in sorted(MODELS)])
def case(request, tmp_path_factory):
    """(family, sync engines per mode, a tensor_parallel engine) for one random model."""
    directory = save(tmp_path_factory.mktemp(request.param), request.param)
    extra = {} if request.param == "bert" else {"enable_bidirectional": False}
    with Engine(str(directory), **TP, **extra) as engine:
        yield request.param, sync_engines(directory, request.param), engine


def test_embeddings_equal_the_sync_executor(case):
    family, sync, tp = case
    assert tp.pipeline.components["executor"].name == "tensor_parallel"
    reference = sync[True if family != "bert" else False]  # the tp engine's own mode
    ours, theirs = tp.encode(TEXTS), reference.encode(TEXTS)
    assert ours.shape == theirs.shape and np.abs(ours - theirs).max() <= TOL


def test_token_states_equal_sync_in_both_modes_on_packed_batches(case):
    """Whether attention is causal travels in the batch (the model never looks): batches built causal and
    bidirectional by the sync engines run on the tp ranks and on the sync worker."""
    family, sync, tp = case
    for causal, engine in sync.items():
        requests = engine.prepare("embed_tokens", TEXTS).requests
        batch = engine.builder.build(requests)
        assert batch.attn_metadata.causal is causal and len(set(batch.seq_lens)) > 5
        ours = tp.executor.submit(batch).result(timeout=60)["tokens"]
        theirs = engine.executor.submit(batch).result()["tokens"]
        assert ours.shape == theirs.shape == (sum(batch.seq_lens), theirs.shape[1])
        assert (ours - theirs).abs().max().item() <= TOL, (family, causal)


def test_each_rank_holds_about_half_of_the_parameters(case):
    family, sync, tp = case
    whole = sum(p.numel() * p.element_size() for p in next(iter(sync.values())).executor.worker.model.parameters())
    per_rank = [rank.parameter_bytes for rank in tp.executor.ranks]
    print(f"{family}: parameter bytes per rank {per_rank} of {whole} ({max(per_rank) / whole:.3f}x)")
    assert len(per_rank) == 2 and max(per_rank) <= 0.55 * whole
    assert tp.pipeline.reasons["tensor_parallel"].startswith("2 ranks (gloo), one process each")
    assert f"({max(per_rank) / whole:.2f}x)" in tp.pipeline.reasons["tensor_parallel"]


def test_the_sharding_is_described_at_assembly(tmp_path):
    """``wde inspect`` prints these reasons: which weights split how, and the bytes per rank."""
    directory = save(tmp_path, "qwen2")
    reasons = assemble_pipeline(str(directory), **TP).reasons
    assert reasons["tensor_parallel"] == ("2 ranks (gloo), one process each; parameters per rank 0.18 MiB of "
                                          "0.36 MiB (0.50x)")
    assert reasons["tp_column"] == ("output rows split per fused part (q/k/v by heads, gate/up); 0.08 of 0.16 MiB per "
                                    "rank: layers.*.self_attn.qkv_proj.weight, layers.*.self_attn.qkv_proj.bias, "
                                    "layers.*.mlp.gate_up_proj.weight")
    assert reasons["tp_row"] == ("input columns split, one all-reduce each, bias added once; 0.04 of 0.08 MiB per "
                                 "rank: layers.*.self_attn.o_proj.weight, layers.*.mlp.down_proj.weight")
    assert reasons["tp_vocab"].endswith("0.06 of 0.12 MiB per rank: embed_tokens.weight")
    assert reasons["tp_replicated"].startswith("whole on every rank; 0.00 of 0.00 MiB per rank: "
                                               "layers.*.input_layernorm.weight")


def test_wde_inspect_prints_the_sharding(tmp_path):
    from click.testing import CliRunner

    from wde_core.cli.main import inspect

    directory = save(tmp_path, "qwen2")
    result = CliRunner().invoke(inspect, [str(directory), "--device", "cpu", "--engine-arg", "executor=tensor_parallel",
                                          "--engine-arg", "tensor_parallel_size=2"])
    assert result.exit_code == 0, result.output
    assert "tensor_parallel: 2 ranks (gloo), one process each; parameters per rank 0.18 MiB" in result.output
    assert "tp_row: input columns split, one all-reduce each, bias added once" in result.output


@pytest.mark.parametrize("overrides, message", [
    ({"num_key_value_heads": 1}, "num_key_value_heads=1 is not divisible by tensor_parallel_size=2"),
    ({"num_attention_heads": 3, "num_key_value_heads": 3, "head_dim": 16},
     "num_attention_heads=3 is not divisible by tensor_parallel_size=2"),
    ({"intermediate_size": 97}, "intermediate_size=97 is not divisible by tensor_parallel_size=2"),
])
def test_heads_that_do_not_divide_are_refused_at_assembly(tmp_path, overrides, message):
    directory = save(tmp_path, "mistral", **overrides)
    with pytest.raises(TensorParallelError, match=f"cannot be split across 2 ranks: {message}"):
        assemble_pipeline(str(directory), **TP)


def test_bert_heads_that_do_not_divide_are_refused(tmp_path):
    directory = save_random_bert(tmp_path, num_attention_heads=1)
    with pytest.raises(TensorParallelError, match="num_attention_heads=1 is not divisible"):
        Engine(str(directory), **TP)


def test_a_model_without_tensor_parallel_support_is_refused_by_name(tmp_path):
    directory = save_random_bert(tmp_path)
    config = json.loads((directory / "config.json").read_text())
    config.update(architectures=["BertForSequenceClassification"], num_labels=1)
    (directory / "config.json").write_text(json.dumps(config))
    with pytest.raises(TensorParallelError, match=r"model class wde_reranker\.models:\w+ \(architecture "
                                                  r"BertForSequenceClassification, from wde-reranker\) does not "
                                                  r"support tensor parallelism"):
        assemble_pipeline(str(directory), **TP)


def test_a_killed_rank_fails_its_batch_naming_it_and_the_engine_refuses_new_work(case):
    """Last for each model (it ends the engine): rank 1 is held, then killed, with a batch in flight."""
    family, sync, engine = case
    victim = engine.executor.ranks[1]
    os.kill(victim.process.pid, signal.SIGSTOP)  # hold the batch inside the victim
    batch = engine.builder.build(engine.prepare("encode", ["held by rank 1"]).requests)
    future = engine.executor.submit(batch)
    os.kill(victim.process.pid, signal.SIGKILL)
    with pytest.raises(RankDiedError, match=r"tensor_parallel rank 1 \(pid \d+\) died with exit code -9; "
                                            r"1 batch\(es\) in flight failed"):
        future.result(timeout=30)
    assert not any(rank.process.is_alive() for rank in engine.executor.ranks)  # rank 0 is not left waiting
    with pytest.raises(BatchError, match="the tensor_parallel executor takes no more work: rank 1"):
        engine.encode(["after the death"])
    assert not engine.has_unfinished()


@pytest.mark.slow
def test_a_rank_that_fails_to_load_is_reported_with_its_traceback(tmp_path):
    directory = save(tmp_path, "qwen2")
    (directory / "model.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(RankDiedError, match=r"(?s)tensor_parallel rank [01] failed while loading the model:.*"
                                            r"WeightsError: corrupted safetensors file"):
        Engine(str(directory), **TP)


@pytest.mark.slow
def test_a_rank_that_raises_stops_the_group_instead_of_leaving_it_out_of_step(tiny_bert_dir):
    with Engine(str(tiny_bert_dir), **TP) as engine:
        future = engine.executor.submit(None)  # every rank fails before its first collective
        with pytest.raises(RankDiedError, match=r"tensor_parallel rank [01] raised AttributeError: .*; "
                                                r"1 batch\(es\) in flight failed"):
            future.result(timeout=30)
        with pytest.raises(BatchError, match="the tensor_parallel executor takes no more work: rank [01] raised"):
            engine.encode("after the failure")


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 CUDA devices")
def test_nccl_two_gpus_equal_one(tmp_path):
    directory = save(tmp_path, "qwen2")
    with Engine(str(directory), device="cuda", dtype="float32") as one:
        expected = one.encode(TEXTS)
    with Engine(str(directory), device="cuda", dtype="float32", executor="tensor_parallel",
                tensor_parallel_size=2) as two:
        assert two.pipeline.reasons["tensor_parallel"].startswith("2 ranks (nccl)")
        assert np.abs(two.encode(TEXTS) - expected).max() <= 1e-4


@pytest.mark.slow
def test_smollm2_split_across_three_ranks_equals_one(smollm2_dir):
    """SmolLM2-135M-Instruct (wde_plugin_kit's ``smollm2_dir`` fixture, converted once a session): its 9 heads cannot be split across 2
    ranks (refused); 3 ranks give the single-process embeddings."""
    with pytest.raises(TensorParallelError, match="num_attention_heads=9 is not divisible by tensor_parallel_size=2"):
        assemble_pipeline(str(smollm2_dir), **TP, max_model_len=128)
    texts, args = wiki_paragraphs(30), dict(device="cpu", max_model_len=128, normalize=False)
    with Engine(str(smollm2_dir), **args) as one:
        expected = one.encode(texts)
        whole = sum(p.numel() * p.element_size() for p in one.executor.worker.model.parameters())
    with Engine(str(smollm2_dir), **args, executor="tensor_parallel", tensor_parallel_size=3) as three:
        ours = three.encode(texts)
        per_rank = max(rank.parameter_bytes for rank in three.executor.ranks)
    cosine = (ours * expected).sum(1) / (np.linalg.norm(ours, axis=1) * np.linalg.norm(expected, axis=1))
    print(f"SmolLM2-135M TP=3 vs TP=1: min cosine {cosine.min():.8f}, max abs diff {np.abs(ours - expected).max():.2e}, "
          f"parameters per rank {per_rank / whole:.3f}x")
    assert cosine.min() >= 0.99999 and per_rank <= 0.4 * whole
