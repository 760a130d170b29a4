"""ELECTRA (wde-reranker): random-weight ``ElectraForSequenceClassification`` (the ms-marco-electra-base shape) and
``ElectraModel`` configs against HF on packed batches on every CPU backend, against sentence-transformers'
``CrossEncoder`` and ``SentenceTransformer``, and the CLI."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from transformers import AutoTokenizer, ElectraConfig, ElectraForSequenceClassification, ElectraModel

from wde_plugin_kit.cpu_info import CPU_BACKENDS
from wde_plugin_kit.packed import random_requests, reference_states, wde_states
from wde_core import Engine
from wde_core.cli.main import cli
from wde_plugin_kit import assert_matches_hf, save_random_model

TOL = 1e-4
BACKENDS = CPU_BACKENDS
CONFIGS = {  # "small": embedding_size == hidden_size (no projection); "odd": projected embeddings, odd sizes
    "small": dict(embedding_size=64, hidden_size=64, num_attention_heads=4, num_hidden_layers=2,
                  intermediate_size=128, max_position_embeddings=64),
    "odd": dict(embedding_size=40, hidden_size=72, num_attention_heads=3, num_hidden_layers=3,
                intermediate_size=101, max_position_embeddings=37, hidden_act="gelu_new", layer_norm_eps=1e-5),
}
QUERY = "Which animal jumps over the dog?"
DOCS = ["The quick brown fox jumps over the lazy dog.", "Stock markets fell sharply on Monday.",
        "A fox is a small omnivorous mammal.", "", "dogs " * 100, "Foxes and dogs are both canids."]
TEXTS = ["a", "Hello world, this is wde.", "word " * 80, "Odd lengths: 1 22 333 4444 55555 !?", ""]


def with_strong_head(config) -> ElectraForSequenceClassification:
    """A classifier whose head weights are scaled up, so that logits are of order 1 rather than 0.01."""
    model = ElectraForSequenceClassification(config)
    with torch.no_grad():
        model.classifier.dense.weight.mul_(20)
        model.classifier.out_proj.weight.mul_(20)
    return model


def save_electra(directory, model_class, architecture, *, seed=0, num_labels=1, st=None, **overrides):
    """A random-weight HF ELECTRA directory with the kit's WordPiece tokenizer (two token types)."""
    labels = ["contradiction", "entailment", "neutral"][:num_labels] if num_labels > 1 else []
    config = ElectraConfig(num_labels=num_labels, **overrides)
    if labels:
        config.id2label, config.label2id = dict(enumerate(labels)), {name: i for i, name in enumerate(labels)}
    config.architectures = [architecture]
    return save_random_model(directory, config, model_class=model_class, seed=seed, st=st)


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def electra_ce(request, tmp_path_factory):
    """A saved random ELECTRA cross-encoder (one label) and its HF reference."""
    directory = save_electra(tmp_path_factory.mktemp("electra-ce") / request.param, with_strong_head,
                             "ElectraForSequenceClassification", seed=3, **CONFIGS[request.param])
    return directory, ElectraForSequenceClassification.from_pretrained(directory, attn_implementation="eager").eval()


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def electra_embedder(request, tmp_path_factory):
    """A saved random ``ElectraModel`` and its HF reference."""
    directory = save_electra(tmp_path_factory.mktemp("electra") / request.param, ElectraModel, "ElectraModel",
                             seed=4, **CONFIGS[request.param])
    return directory, ElectraModel.from_pretrained(directory, attn_implementation="eager").eval()


def packed_lengths(max_len: int) -> list[int]:
    """Every length 1..max_len, shuffled."""
    lengths = list(range(1, max_len + 1))
    np.random.default_rng(7).shuffle(lengths)
    return lengths


@pytest.mark.parametrize("backend", BACKENDS)
def test_cross_encoder_logits_match_hf_on_packed_batches(electra_ce, backend):
    directory, reference = electra_ce
    engine = Engine(str(directory), device="cpu", attention_backend=backend)
    assert engine.task == "rerank" and engine.pipeline.link.variant == "single-logit"
    requests = random_requests(reference.config, packed_lengths(engine.pipeline.settings.max_model_len))
    worst_states = worst_logits = 0.0
    for i in range(0, len(requests), 9):
        chunk = requests[i: i + 9]
        ours = wde_states(engine, chunk)
        theirs = reference_states(reference.electra, chunk)
        worst_states = max(worst_states, *((o - t).abs().max().item() for o, t in zip(ours, theirs)))
        with torch.inference_mode():
            logits = engine.executor.worker.model.head(torch.stack([o[0] for o in ours]))
            expected = reference.classifier(torch.stack([t[:1] for t in theirs]))  # the head reads token 0
        worst_logits = max(worst_logits, (logits - expected).abs().max().item())
    print(f"\n{directory.name} {backend}: token states {worst_states:.3g}, logits {worst_logits:.3g}")
    assert worst_states <= TOL and worst_logits <= TOL


@pytest.mark.parametrize("backend", BACKENDS)
def test_scores_match_hf_for_text_pairs(electra_ce, backend):
    directory, reference = electra_ce
    engine = Engine(str(directory), device="cpu", attention_backend=backend)
    pairs = [(QUERY, d) for d in DOCS] + [("", "empty query"), ("short", "x")]
    tokenizer = AutoTokenizer.from_pretrained(directory)
    batch = tokenizer([q for q, _ in pairs], [d for _, d in pairs], padding=True, truncation="only_second",
                      max_length=engine.pipeline.settings.max_model_len, return_tensors="pt")
    with torch.no_grad():
        theirs = reference(**batch).logits[:, 0].numpy()
    ours = engine.score(pairs, raw_scores=True)
    print(f"\n{directory.name} {backend}: logits {theirs.min():.3f}..{theirs.max():.3f}, "
          f"max abs diff {np.abs(ours - theirs).max():.3g}")
    assert np.abs(ours - theirs).max() <= TOL
    assert np.abs(engine.score(pairs) - 1 / (1 + np.exp(-theirs))).max() <= TOL  # sigmoid by default


def test_predict_and_rank_match_cross_encoder(electra_ce):
    from sentence_transformers import CrossEncoder

    directory, _ = electra_ce
    engine = Engine(str(directory), device="cpu")
    reference = CrossEncoder(str(directory), device="cpu", max_length=engine.pipeline.settings.max_model_len)
    docs = [d for d in DOCS if len(d) < 60]
    pairs = [(QUERY, d) for d in docs]
    diff = np.abs(engine.score(pairs) - reference.predict(pairs)).max()
    print(f"\n{directory.name}: scores vs CrossEncoder max abs diff {diff:.3g}")
    assert diff <= TOL
    ours, theirs = engine.rerank(QUERY, docs), reference.rank(QUERY, docs)
    assert [r["index"] for r in ours] == [r["corpus_id"] for r in theirs]


def test_several_labels_classify_with_softmax(tmp_path):
    directory = save_electra(tmp_path / "nli", with_strong_head, "ElectraForSequenceClassification",
                             num_labels=3, **CONFIGS["odd"])
    engine = Engine(str(directory), device="cpu")
    assert engine.task == "classify" and engine.pipeline.link.variant == "several-labels"
    pairs = [("A man eats.", "Someone is eating."), ("A cat.", "")]
    reference = ElectraForSequenceClassification.from_pretrained(directory, attn_implementation="eager").eval()
    batch = AutoTokenizer.from_pretrained(directory)([p for p, _ in pairs], [h for _, h in pairs], padding=True,
                                                     return_tensors="pt")
    with torch.no_grad():
        expected = torch.softmax(reference(**batch).logits, -1).numpy()
    ours = engine.classify(pairs)
    assert np.abs(np.array([[r[n] for n in ("contradiction", "entailment", "neutral")] for r in ours])
                  - expected).max() <= TOL


@pytest.mark.parametrize("backend", BACKENDS)
def test_embedder_token_states_match_hf_on_packed_batches(electra_embedder, backend):
    directory, reference = electra_embedder
    engine = Engine(str(directory), device="cpu", attention_backend=backend)
    requests = random_requests(reference.config, packed_lengths(engine.pipeline.settings.max_model_len))
    worst = 0.0
    for i in range(0, len(requests), 9):
        chunk = requests[i: i + 9]
        worst = max(worst, *((o - t).abs().max().item()
                             for o, t in zip(wde_states(engine, chunk), reference_states(reference, chunk))))
    print(f"\n{directory.name} {backend}: embedder token states {worst:.3g}")
    assert worst <= TOL


@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_embedder_pooled_outputs_match_hf(electra_embedder, pooling):
    directory, reference = electra_embedder
    report = assert_matches_hf(directory, TEXTS, hf_model=reference, attention_backends=BACKENDS, pooling=pooling)
    print(f"\n{directory.name} {pooling}: {report}")


def test_embedder_matches_sentence_transformers(tmp_path):
    from sentence_transformers import SentenceTransformer

    directory = save_electra(tmp_path / "st", ElectraModel, "ElectraModel", seed=5,
                             st=dict(pooling="mean", normalize=True, prompts={"query": "query: "}), **CONFIGS["odd"])
    engine, reference = Engine(str(directory), device="cpu"), SentenceTransformer(str(directory), device="cpu")
    for kwargs in ({}, {"prompt_name": "query"}):
        ours, theirs = engine.encode(TEXTS, **kwargs), reference.encode(TEXTS, **kwargs)
        cosine = (ours * theirs).sum(1) / (np.linalg.norm(ours, axis=1) * np.linalg.norm(theirs, axis=1))
        print(f"\nElectraModel {kwargs}: min cosine {cosine.min():.7f}")
        assert cosine.min() >= 0.99999


@pytest.fixture
def wde(isolated_host):
    """Run ``wde ARGS...`` in process on a fresh host with the installed plugins' commands."""
    isolated_host.register_commands(cli)
    runner = CliRunner()
    return lambda *args: runner.invoke(cli, [str(a) for a in args])


def test_list_workflows_and_inspect(wde, electra_ce):
    directory, _ = electra_ce
    listed = wde("list-workflows")
    assert listed.exit_code == 0, listed.output
    rows = {tuple(line.split()) for line in listed.stdout.splitlines()}
    assert {("ElectraForSequenceClassification", "rerank", "single-logit", "wde-reranker"),
            ("ElectraForSequenceClassification", "classify", "several-labels", "wde-reranker"),
            ("ElectraModel", "embed", "wde-reranker")} <= rows
    info = json.loads(wde("inspect", directory, "--device", "cpu", "--json").stdout)
    assert (info["architecture"], info["workflow"], info["model_provider"]) == (
        "ElectraForSequenceClassification", "rerank", "wde-reranker")
    assert info["reasons"]["activation"] == "single logit: sigmoid (as sentence-transformers' CrossEncoder and TEI)"
    assert info["reasons"]["pooling"] == "default of wde-reranker"
    lines = [" ".join(line.split()) for line in wde("inspect", directory, "--device", "cpu").stdout.splitlines()]
    assert ("workflow: rerank (ElectraForSequenceClassification (num_labels == 1: a relevance score) is linked to "
            "'rerank' for task 'rerank' by wde-reranker)") in lines
    assert "model_class: wde_reranker.electra:ElectraCrossEncoder" in lines
