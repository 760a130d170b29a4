"""ModernBERT (wde-modernbert): random-weight ``ModernBertModel`` and ``ModernBertForSequenceClassification`` against
HF on packed mixed-length batches (sequences longer than the local window, global and local layers alternating) on
every CPU backend; sentence-transformers' SentenceTransformer and CrossEncoder on the same saved models; the CLI."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from transformers import (ModernBertConfig, ModernBertForMaskedLM, ModernBertForSequenceClassification,
                          ModernBertModel)

from wde_plugin_kit.cpu_info import CPU_BACKENDS
from wde_plugin_kit.packed import packed_diff, random_requests
from wde_core import Engine
from wde_core.cli.main import cli
from wde_core.plugin_api import Request, ScoreOptions
from wde_plugin_kit import assert_matches_hf, save_random_model

TOL = 1e-4
BACKENDS = CPU_BACKENDS
LABELS = ["contradiction", "entailment", "neutral"]
# "base": ModernBERT-base's shape in small (global every 3rd layer, no biases, local window 8 = 4 either side);
# "odd": odd sizes (head_dim 20, intermediate 77), an odd window (7: 3 either side), global every 2nd layer,
# every bias on, other RoPE thetas, mean classifier pooling and another head activation
CONFIGS = {
    "base": dict(hidden_size=32, num_attention_heads=2, num_hidden_layers=4, intermediate_size=48,
                 max_position_embeddings=64, local_attention=8, global_attn_every_n_layers=3),
    "odd": dict(hidden_size=60, num_attention_heads=3, num_hidden_layers=5, intermediate_size=77,
                max_position_embeddings=45, local_attention=7, global_attn_every_n_layers=2, norm_bias=True,
                attention_bias=True, mlp_bias=True, classifier_bias=True, classifier_pooling="mean",
                classifier_activation="silu", norm_eps=1e-6,
                rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 50000.0},
                                 "sliding_attention": {"rope_type": "default", "rope_theta": 2000.0}}),
}
TEXTS = ["a", "Hello world, this is wde.", "word " * 250, "Odd lengths: 1 22 333 4444 55555 !?",
         "The quick brown fox jumps over the lazy dog. " * 4, ""]
QUERY = "Which animal jumps over the dog?"
DOCS = ["The quick brown fox jumps over the lazy dog.", "Stock markets fell sharply on Monday.",
        "A fox is a small omnivorous mammal.", "", "dogs " * 200, "Foxes and dogs are both canids."]


def save_modernbert(directory, case, *, model_class=ModernBertModel, seed=0, st=None, num_labels=None, **overrides):
    """A random-weight ModernBERT directory with a byte-level BPE tokenizer (no token types, as ModernBERT's)."""
    options = {**CONFIGS[case], **overrides}
    if num_labels is not None:
        labels = {i: label for i, label in enumerate(LABELS[:num_labels])} if num_labels > 1 else {}
        options.update(num_labels=num_labels, initializer_range=0.1,
                       **({"id2label": labels, "label2id": {v: k for k, v in labels.items()}} if labels else {}))
    config = ModernBertConfig(vocab_size=100, pad_token_id=1, bos_token_id=0, eos_token_id=2, cls_token_id=0,
                              sep_token_id=2, **options)
    config.architectures = [model_class.__name__]
    return save_random_model(directory, config, model_class=model_class, seed=seed, tokenizer="bpe", st=st)


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def case(request, tmp_path_factory):
    """A saved random ``ModernBertModel`` directory and HF's model loaded from it (eager attention)."""
    directory = save_modernbert(tmp_path_factory.mktemp("modernbert") / request.param, request.param, seed=5)
    return directory, ModernBertModel.from_pretrained(directory, attn_implementation="eager").eval()


def shuffled_lengths(max_len: int, seed: int = 3) -> list[int]:
    lengths = list(range(1, max_len + 1))
    np.random.default_rng(seed).shuffle(lengths)
    return lengths


@pytest.mark.parametrize("backend", BACKENDS)
def test_token_states_match_hf_on_packed_batches(case, backend):
    directory, reference = case
    engine = Engine(str(directory), device="cpu", attention_backend=backend)
    max_len = reference.config.max_position_embeddings
    assert engine.pipeline.settings.max_model_len == max_len and 2 * reference.config.sliding_window < max_len
    assert {"full_attention", "sliding_attention"} == set(reference.config.layer_types)
    requests = random_requests(reference.config, shuffled_lengths(max_len), lowest_id=5)
    worst = max(packed_diff(engine, reference, requests[i: i + 9], pad_id=1) for i in range(0, len(requests), 9))
    print(f"\n{directory.name} {backend}: token states max abs diff {worst:.3g}")
    assert worst <= TOL


def test_equal_length_batches(case):
    directory, reference = case
    engine = Engine(str(directory), device="cpu", attention_backend="torch_sdpa")
    for n in (1, 7, reference.config.max_position_embeddings):
        requests = random_requests(reference.config, [n] * 5, seed=n, lowest_id=5)
        assert packed_diff(engine, reference, requests, pad_id=1) <= TOL


def test_the_local_window_is_exactly_hfs(case):
    """One position more or less in the window, or no window, and the states move far from HF's."""
    directory, reference = case
    engine = Engine(str(directory), device="cpu", attention_backend="torch_sdpa")
    requests = random_requests(reference.config, [reference.config.max_position_embeddings, 30, 20], lowest_id=5)
    local = [layer for layer in engine.executor.worker.model.layers if layer.window is not None]
    assert local and all(layer.window == reference.config.local_attention // 2 for layer in local)
    assert packed_diff(engine, reference, requests, pad_id=1) <= TOL
    window = local[0].window
    for wrong in (window - 1, window + 1, None):
        for layer in local:
            layer.window = wrong
        assert packed_diff(engine, reference, requests, pad_id=1) > 1e-3, wrong


@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_pooled_outputs_match_hf(case, pooling):
    directory, reference = case
    report = assert_matches_hf(directory, TEXTS, hf_model=reference, attention_backends=BACKENDS, pooling=pooling)
    print(f"\n{directory.name} {pooling}: {report}")
    assert set(report) == set(BACKENDS)


def test_masked_lm_checkpoints_embed_without_their_head(tmp_path):
    directory = save_modernbert(tmp_path / "mlm", "odd", model_class=ModernBertForMaskedLM, seed=2)
    reference = ModernBertForMaskedLM.from_pretrained(directory, attn_implementation="eager").model.eval()
    report = assert_matches_hf(directory, TEXTS, hf_model=reference, attention_backends=BACKENDS)
    print(f"\nModernBertForMaskedLM: {report}")


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise cosine similarity."""
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


@pytest.mark.parametrize("case_name, pooling, normalize", [("base", "cls", True), ("odd", "mean", False)])
def test_matches_sentence_transformers(tmp_path, case_name, pooling, normalize):
    from sentence_transformers import SentenceTransformer

    st = dict(pooling=pooling, normalize=normalize, max_seq_length=40)
    directory = save_modernbert(tmp_path / case_name, case_name, seed=4, st=st)
    engine = Engine(str(directory), device="cpu")
    reference = SentenceTransformer(str(directory), device="cpu")
    assert (engine.pipeline.settings.pooling, engine.pipeline.settings.max_model_len) == (pooling, 40)
    ours, theirs = engine.encode(TEXTS), reference.encode(TEXTS)
    print(f"\n{case_name}: min cosine {cosines(ours, theirs).min():.7f}, max abs diff {np.abs(ours - theirs).max():.3g}")
    assert cosines(ours, theirs).min() >= 0.99999 and np.abs(ours - theirs).max() <= TOL


@pytest.fixture(scope="module")
def cross_encoders(tmp_path_factory):
    """``(config name, num_labels) -> directory`` of a random ``ModernBertForSequenceClassification``."""
    built = {}

    def get(name: str, num_labels: int = 1):
        if (name, num_labels) not in built:
            directory = tmp_path_factory.mktemp(f"modernbert-ce-{name}-{num_labels}")
            built[name, num_labels] = save_modernbert(directory, name, model_class=ModernBertForSequenceClassification,
                                                      num_labels=num_labels, seed=len(built))
        return built[name, num_labels]

    return get


def hf_logits_alone(directory, sequences) -> np.ndarray:
    """HF's logits for each token sequence run alone: ``[n, num_labels]``."""
    model = ModernBertForSequenceClassification.from_pretrained(directory, attn_implementation="eager").eval()
    with torch.no_grad():
        return np.stack([model(input_ids=torch.tensor([ids])).logits[0].numpy() for ids in sequences])


def run_raw(engine, sequences) -> np.ndarray:
    """Raw logits of token sequences through the engine's scheduler, builder, worker and output stages."""
    requests = [Request(i, f"seq{i}", ScoreOptions(raw_scores=True), token_ids=ids) for i, ids in enumerate(sequences)]
    results = engine.run(requests)
    return np.array([list(r.values()) if isinstance(r, dict) else [r] for r in results], dtype=np.float32)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("num_labels", [1, 3])
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_classifier_logits_match_hf_on_packed_mixed_batches(cross_encoders, name, num_labels, backend):
    directory = cross_encoders(name, num_labels)
    engine = Engine(str(directory), device="cpu", dtype="float32", attention_backend=backend,
                    max_num_batched_tokens=300)  # several batches, each of mixed lengths
    assert engine.task == ("rerank" if num_labels == 1 else "classify")
    config = engine.pipeline.model.config
    assert engine.pipeline.settings.pooling == config.classifier_pooling
    gen = torch.Generator().manual_seed(num_labels)
    sequences = [torch.randint(3, config.vocab_size, (n,), generator=gen).tolist()
                 for n in shuffled_lengths(engine.pipeline.settings.max_model_len)]
    ours, theirs = run_raw(engine, sequences), hf_logits_alone(directory, sequences)
    assert ours.shape == theirs.shape == (len(sequences), num_labels)
    assert np.std(theirs) > 0.05  # logits that differ between inputs, not a constant
    print(f"\n{name} labels={num_labels} {backend}: logits max abs diff {np.abs(ours - theirs).max():.3g}")
    assert np.abs(ours - theirs).max() <= TOL


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_scores_match_sentence_transformers_cross_encoder(cross_encoders, name):
    from sentence_transformers import CrossEncoder

    pairs = [(QUERY, d) for d in DOCS]
    for num_labels in (1, 3):
        directory = cross_encoders(name, num_labels)
        engine = Engine(str(directory), device="cpu")
        reference = CrossEncoder(str(directory), device="cpu", max_length=engine.pipeline.settings.max_model_len)
        if num_labels == 1:
            ours, theirs = engine.score(pairs), reference.predict(pairs)
        else:
            ours = np.array([list(r.values()) for r in engine.classify(pairs, raw_scores=True)]).ravel()
            theirs = reference.predict(pairs, activation_fn=torch.nn.Identity()).ravel()
        cosine = float(ours @ theirs / (np.linalg.norm(ours) * np.linalg.norm(theirs)))
        print(f"\n{name} labels={num_labels}: cosine {cosine:.7f}, max abs diff {np.abs(ours - theirs).max():.3g}")
        assert cosine >= 0.99999 and np.abs(ours - theirs).max() <= TOL, (num_labels, cosine)
    ranked = Engine(str(cross_encoders(name, 1)), device="cpu").rerank(QUERY, DOCS)
    theirs = CrossEncoder(str(cross_encoders(name, 1)), device="cpu").rank(QUERY, DOCS)
    assert [r["index"] for r in ranked] == [r["corpus_id"] for r in theirs]


def test_non_default_rope_is_refused(tmp_path):
    rope = {kind: {"rope_type": "linear", "rope_theta": 10000.0, "factor": 2.0}
            for kind in ("full_attention", "sliding_attention")}
    directory = save_modernbert(tmp_path / "linear", "base", rope_parameters=rope)
    with pytest.raises(ValueError, match="RoPE type 'linear' is not supported by wde-modernbert"):
        Engine(str(directory), device="cpu")


def test_list_workflows_and_inspect(isolated_host, cross_encoders, tmp_path):
    isolated_host.register_commands(cli)
    runner = CliRunner()
    listed = runner.invoke(cli, ["list-workflows"])
    assert listed.exit_code == 0, listed.output
    rows = {tuple(line.split()) for line in listed.stdout.splitlines()}
    arch = "ModernBertForSequenceClassification"
    assert {("ModernBertModel", "embed", "wde-modernbert"), ("ModernBertForMaskedLM", "embed", "wde-modernbert"),
            (arch, "rerank", "single-logit", "wde-modernbert"), (arch, "classify", "several-labels",
                                                                  "wde-modernbert")} <= rows
    embedder = save_modernbert(tmp_path / "embedder", "base")
    text = runner.invoke(cli, ["inspect", str(embedder), "--device", "cpu"]).output
    lines = [" ".join(line.split()) for line in text.splitlines()]
    assert "pooling: mean (default of wde-modernbert)" in lines, text
    assert "workflow: embed (ModernBertModel is linked to 'embed' for task 'embed' by wde-modernbert)" in lines, text
    assert ("attention: global attention in layers 0, 3 of 4 (RoPE theta 160000); the others attend within 4 "
            "tokens either side (local_attention=8, RoPE theta 10000), through the attention backend's window"
            ) in lines, text
    info = json.loads(runner.invoke(cli, ["inspect", str(cross_encoders("odd", 3)), "--json"]).stdout)
    assert (info["task"], info["pooling"], info["activation"]) == ("classify", "mean", "softmax")
    assert info["reasons"]["pooling"].startswith("config.json classifier_pooling (mean)")
    assert info["reasons"]["attention"].startswith("global attention in layers 0, 2, 4 of 5 (RoPE theta 50000)")
