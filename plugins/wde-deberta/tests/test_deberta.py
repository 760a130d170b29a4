"""DeBERTa-v2/v3 cross-encoders (wde-deberta): random-weight ``DebertaV2ForSequenceClassification`` models
against HF logits (packed mixed-length batches, every CPU backend) and sentence-transformers' CrossEncoder;
the CLI's listing and explanations."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from transformers import AutoTokenizer, DebertaV2Config, DebertaV2ForSequenceClassification

from wde_plugin_kit.cpu_info import CPU_BACKENDS
from wde_plugin_kit.encoders import random_sequences, run_raw
from wde_core import Engine
from wde_core.cli.main import cli
from wde_plugin_kit import save_random_model

TOL = 1e-4
BACKENDS = CPU_BACKENDS
ARCH = "DebertaV2ForSequenceClassification"
LABELS = ["contradiction", "entailment", "neutral"]
QUERY = "Which animal jumps over the dog?"
DOCS = ["The quick brown fox jumps over the lazy dog.", "Stock markets fell sharply on Monday.",
        "A fox is a small omnivorous mammal.", "", "dogs " * 200, "Foxes and dogs are both canids."]
# v3-like: odd sizes, shared keys, log buckets (exact within 4, log-spaced beyond), relative LayerNorm,
# no absolute positions, no token types. v2-like: own position projections, distances clamped at 16,
# absolute positions added, two token types; and sparser variants: c2p only, no relative attention, and
# relative attention with no pos_att_type (HF keeps the relative table but adds nothing from it).
CONFIGS = {
    "v3-buckets": dict(hidden_size=72, num_attention_heads=3, intermediate_size=101, max_position_embeddings=64,
                       position_buckets=8, max_relative_positions=-1, share_att_key=True, norm_rel_ebd="layer_norm",
                       position_biased_input=False, type_vocab_size=0, pos_att_type=["p2c", "c2p"]),
    "v2-clamped": dict(hidden_size=64, num_attention_heads=4, intermediate_size=96, max_position_embeddings=48,
                       position_buckets=-1, max_relative_positions=16, share_att_key=False, norm_rel_ebd="none",
                       position_biased_input=True, type_vocab_size=2, pos_att_type=["p2c", "c2p"]),
    "c2p-only": dict(hidden_size=48, num_attention_heads=2, intermediate_size=80, max_position_embeddings=40,
                     position_buckets=6, max_relative_positions=24, share_att_key=False, norm_rel_ebd="layer_norm",
                     position_biased_input=False, type_vocab_size=0, pos_att_type=["c2p"]),
    "no-relative": dict(hidden_size=48, num_attention_heads=4, intermediate_size=64, max_position_embeddings=40,
                        relative_attention=False, position_biased_input=True, type_vocab_size=2,
                        pos_att_type=["p2c", "c2p"]),
    "unused-table": dict(hidden_size=48, num_attention_heads=4, intermediate_size=64, max_position_embeddings=40,
                         position_buckets=8, norm_rel_ebd="layer_norm", position_biased_input=False, type_vocab_size=0,
                         pos_att_type=[]),
}
MAIN = ["v3-buckets", "v2-clamped"]


def save_deberta(directory, name: str, num_labels: int, *, seed: int = 0):
    """A random ``DebertaV2ForSequenceClassification`` (weights with std 0.1, so scores spread) and a tokenizer."""
    options = {"relative_attention": True, **CONFIGS[name]}
    labels = {i: label for i, label in enumerate(LABELS[:num_labels])} if num_labels > 1 else {}
    config = DebertaV2Config(num_hidden_layers=2, hidden_act="gelu", initializer_range=0.1, layer_norm_eps=1e-7,
                             num_labels=num_labels, **options,
                             **({"id2label": labels, "label2id": {v: k for k, v in labels.items()}} if labels else {}))
    config.architectures = [ARCH]
    tokenizer = "wordpiece" if config.type_vocab_size > 1 else "bpe"
    return save_random_model(directory, config, model_class=DebertaV2ForSequenceClassification, seed=seed,
                             tokenizer=tokenizer)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """``(config name, num_labels) -> directory``, built on first use."""
    built = {}

    def get(name: str, num_labels: int = 1):
        if (name, num_labels) not in built:
            directory = tmp_path_factory.mktemp(f"deberta-{name}-{num_labels}")
            built[name, num_labels] = save_deberta(directory, name, num_labels, seed=len(built))
        return built[name, num_labels]

    return get


def hf_model(directory):
    return DebertaV2ForSequenceClassification.from_pretrained(directory).eval()


def hf_logits_alone(model, sequences) -> np.ndarray:
    """HF's logits for each token sequence run alone: ``[(ids, types or None)] -> [n, num_labels]``."""
    rows = []
    with torch.no_grad():
        for ids, types in sequences:
            kwargs = {} if types is None else {"token_type_ids": torch.tensor([types])}
            rows.append(model(input_ids=torch.tensor([ids]), **kwargs).logits[0].numpy())
    return np.stack(rows)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("num_labels", [1, 3])
@pytest.mark.parametrize("name", MAIN)
def test_every_length_in_packed_mixed_batches_matches_hf(models, name, num_labels, backend):
    directory = models(name, num_labels)
    engine = Engine(str(directory), device="cpu", dtype="float32", attention_backend=backend,
                    max_num_batched_tokens=300)  # several batches, each of mixed lengths
    assert engine.task == ("rerank" if num_labels == 1 else "classify")
    max_len = engine.pipeline.settings.max_model_len
    sequences = random_sequences(engine.pipeline.model.config, max_len, seed=num_labels)
    ours = run_raw(engine, sequences)
    theirs = hf_logits_alone(hf_model(directory), sequences)
    assert ours.shape == theirs.shape == (max_len, num_labels)
    assert np.std(theirs) > 0.05  # logits that differ between inputs, not a constant
    assert np.abs(ours - theirs).max() <= TOL


@pytest.mark.parametrize("name", ["c2p-only", "no-relative", "unused-table"])
def test_sparser_configs_match_hf(models, name):
    directory = models(name, 1)
    hf = hf_model(directory)
    for backend in BACKENDS:
        engine = Engine(str(directory), device="cpu", attention_backend=backend, max_num_batched_tokens=200)
        sequences = random_sequences(engine.pipeline.model.config, engine.pipeline.settings.max_model_len, seed=7)
        assert np.abs(run_raw(engine, sequences) - hf_logits_alone(hf, sequences)).max() <= TOL


def hf_pair_logits(directory, pairs, max_length) -> np.ndarray:
    """HF's logits for pairs as one right-padded batch, documents truncated (``only_second``)."""
    tokenizer = AutoTokenizer.from_pretrained(directory)
    batch = tokenizer([q for q, _ in pairs], [d for _, d in pairs], padding=True, truncation="only_second",
                      max_length=max_length, return_tensors="pt")
    with torch.no_grad():
        return hf_model(directory)(**batch).logits.numpy()


@pytest.mark.parametrize("name", MAIN)
def test_score_rerank_and_classify_pairs_match_hf(models, name):
    pairs = [(QUERY, d) for d in DOCS] + [("", "empty query"), ("short", "x")]
    reranker = Engine(str(models(name, 1)), device="cpu")
    max_len = reranker.pipeline.settings.max_model_len
    logits = hf_pair_logits(models(name, 1), pairs, max_len)[:, 0]
    assert np.abs(reranker.score(pairs, raw_scores=True) - logits).max() <= TOL
    assert np.abs(reranker.score(pairs) - 1 / (1 + np.exp(-logits))).max() <= TOL
    same_lengths = reranker.score([pairs[0]] * 3, raw_scores=True)  # one unpadded block: the packed tokens as is
    assert np.abs(same_lengths - logits[0]).max() <= TOL
    ranked = reranker.rerank(QUERY, DOCS, top_n=3)
    assert [r["index"] for r in ranked] == sorted(range(len(DOCS)), key=lambda i: (-logits[i], i))[:3]
    classifier = Engine(str(models(name, 3)), device="cpu")
    probs = classifier.classify(pairs)
    assert [list(p) for p in probs] == [LABELS] * len(pairs)
    expected = torch.softmax(torch.from_numpy(hf_pair_logits(models(name, 3), pairs, max_len)), -1).numpy()
    assert np.abs(np.array([list(p.values()) for p in probs]) - expected).max() <= TOL


@pytest.mark.parametrize("name", MAIN)
def test_scores_match_sentence_transformers_cross_encoder(models, name):
    from sentence_transformers import CrossEncoder

    docs = DOCS[:4] + ["Jumping is a form of locomotion.", "The dog sleeps while the fox jumps. " * 3]
    pairs = [(QUERY, d) for d in docs]
    for num_labels in (1, 3):
        directory = models(name, num_labels)
        engine = Engine(str(directory), device="cpu")
        reference = CrossEncoder(str(directory), device="cpu", max_length=engine.pipeline.settings.max_model_len)
        if num_labels == 1:
            ours, theirs = engine.score(pairs), reference.predict(pairs)
        else:
            ours = np.array([list(r.values()) for r in engine.classify(pairs, raw_scores=True)]).ravel()
            theirs = reference.predict(pairs, activation_fn=torch.nn.Identity()).ravel()
        cosine = float(ours @ theirs / (np.linalg.norm(ours) * np.linalg.norm(theirs)))
        assert cosine >= 0.99999 and np.abs(ours - theirs).max() <= TOL, (num_labels, cosine)
    ranked = Engine(str(models(name, 1)), device="cpu").rerank(QUERY, docs)
    theirs = CrossEncoder(str(models(name, 1)), device="cpu").rank(QUERY, docs)
    assert [r["index"] for r in ranked] == [r["corpus_id"] for r in theirs]


def test_blocks_cover_every_sequence_once_within_the_padding_budget():
    from wde_deberta.layout import PAD_BUDGET, PAD_SLACK, group_lengths, plan_blocks

    lengths = [338, 5, 252, 44, 338, 1, 125, 176, 37, 512, 2, 95, 124]
    groups = group_lengths(lengths)
    assert sorted(i for g in groups for i in g) == list(range(len(lengths)))
    for group in groups:
        real, padded = sum(lengths[i] ** 2 for i in group), len(group) * max(lengths[i] for i in group) ** 2
        assert padded <= max(PAD_BUDGET * real, real + PAD_SLACK)
    starts = np.cumsum([0] + lengths[:-1]).tolist()
    blocks = plan_blocks(lengths, starts, "cpu")
    tokens = torch.cat([b.tokens for b in blocks]).sort().values
    assert torch.equal(tokens, torch.arange(sum(lengths)))  # every packed token in exactly one block
    assert plan_blocks([7, 7, 7], [0, 7, 14], "cpu")[0].tokens is None


def test_list_workflows_and_inspect_explain_the_choices(models, isolated_host):
    isolated_host.register_commands(cli)
    runner = CliRunner()
    listed = runner.invoke(cli, ["list-workflows"])
    assert listed.exit_code == 0, listed.output
    rows = {tuple(line.split()) for line in listed.stdout.splitlines()}
    assert {(ARCH, "rerank", "single-logit", "wde-deberta"), (ARCH, "classify", "several-labels", "wde-deberta")} <= rows
    data = json.loads(runner.invoke(cli, ["list-workflows", "--json"]).stdout)
    links = {wf["workflow"]: [link for link in wf["architectures"] if link["architecture"] == ARCH]
             for wf in data["workflows"]}
    assert [link["model"] for link in links["rerank"] + links["classify"]] == [
        "wde_deberta.model:DebertaV2CrossEncoder"] * 2 and data["problems"] == []
    out = runner.invoke(cli, ["inspect", str(models("v3-buckets", 1)), "--device", "cpu"]).output
    assert "task: rerank" in out and "workflow: rerank" in out and "wde-deberta" in out
    assert "num_labels == 1" in out and "activation: sigmoid   (single logit: sigmoid" in out
    assert "attention: disentangled (c2p+p2c, 8 log buckets each side up to distance 64; keys shared" in out
    assert "the attention backend is not used" in out and "no absolute positions" in out
    info = json.loads(runner.invoke(cli, ["inspect", str(models("v2-clamped", 3)), "--json"]).stdout)
    assert (info["task"], info["activation"], info["reasons"]["activation"]) == ("classify", "softmax",
                                                                                 "softmax over labels")
    assert "relative distances clamped at 16; own position projections; plus absolute positions" in \
        info["reasons"]["attention"]
    plain = json.loads(runner.invoke(cli, ["inspect", str(models("no-relative", 1)), "--json"]).stdout)
    assert plain["reasons"]["attention"].startswith("no relative-position terms")


def test_unsupported_convolution_is_refused(tmp_path):
    config = DebertaV2Config(vocab_size=100, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                             intermediate_size=48, conv_kernel_size=3, relative_attention=True,
                             pos_att_type=["p2c", "c2p"], num_labels=1)
    config.architectures = [ARCH]
    directory = save_random_model(tmp_path / "conv", config, model_class=DebertaV2ForSequenceClassification,
                                  tokenizer="bpe")
    with pytest.raises(ValueError, match=r"conv_kernel_size > 0.*not supported"):
        Engine(str(directory), device="cpu")
