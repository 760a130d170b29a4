"""NomicBert and GTE v2 (wde-rope-encoders): random-weight configs against HF ``NomicBertModel``/``GteModel`` on
packed batches (RoPE positions restarting at 0 per sequence) on every CPU backend, pooled outputs,
sentence-transformers files, nomic's prompts and Matryoshka dimensions against ``SentenceTransformer``, the CLI."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from transformers import GteConfig, GteModel, NomicBertConfig, NomicBertForMaskedLM, NomicBertModel

from wde_plugin_kit.packed import packed_diff, random_requests
from wde_core import Engine
from wde_core.cli.main import cli
from wde_plugin_kit import assert_matches_hf, save_random_model

TOL = 1e-4
BACKENDS = ["torch_sdpa", "eager"]
HF = {"NomicBertModel": (NomicBertConfig, NomicBertModel), "GteModel": (GteConfig, GteModel)}
CONFIGS = {  # "odd": odd sizes (head_dim 20, intermediate 77); gte-odd: no token types (gte-base-en-v1.5)
    "nomic": ("NomicBertModel", dict(hidden_size=32, num_attention_heads=2, num_hidden_layers=2,
                                     intermediate_size=64, max_position_embeddings=64)),
    "nomic-odd": ("NomicBertModel", dict(hidden_size=60, num_attention_heads=3, num_hidden_layers=3,
                                         intermediate_size=77, max_position_embeddings=45, layer_norm_eps=1e-5)),
    "gte": ("GteModel", dict(hidden_size=32, num_attention_heads=4, num_hidden_layers=2, intermediate_size=64,
                             max_position_embeddings=64, hidden_act="gelu")),
    "gte-odd": ("GteModel", dict(hidden_size=60, num_attention_heads=3, num_hidden_layers=3, intermediate_size=77,
                                 max_position_embeddings=45, type_vocab_size=0, layer_norm_eps=1e-5,
                                 rope_parameters={"rope_type": "default", "rope_theta": 500000.0})),
}
TEXTS = ["a", "Hello world, this is wde.", "word " * 250, "Odd lengths: 1 22 333 4444 55555 !?",
         "The quick brown fox jumps over the lazy dog. " * 4, ""]
NOMIC_PROMPTS = {"query": "search_query: ", "document": "search_document: ", "clustering": "clustering: "}


def save_random(directory, case, *, seed=0, model_class=None, architecture=None, st=None, **overrides):
    """A random-weight HF directory for ``CONFIGS[case]`` (overridden), with a tiny WordPiece tokenizer."""
    arch, sizes = CONFIGS[case]
    config_class, hf_class = HF[arch]
    config = config_class(**{**sizes, **overrides})
    config.architectures = [architecture or arch]
    return save_random_model(directory, config, model_class=model_class or hf_class, seed=seed, st=st)


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def case(request, tmp_path_factory):
    """A saved random directory and the HF reference model loaded from it."""
    directory = save_random(tmp_path_factory.mktemp("rope") / request.param, request.param, seed=5)
    hf_class = HF[CONFIGS[request.param][0]][1]
    return directory, hf_class.from_pretrained(directory, attn_implementation="eager").eval()


@pytest.mark.parametrize("backend", BACKENDS)
def test_token_states_match_hf_on_packed_batches(case, backend):
    directory, reference = case
    engine = Engine(str(directory), device="cpu", attention_backend=backend)
    max_len = reference.config.max_position_embeddings
    assert engine.pipeline.settings.max_model_len == max_len
    assert engine.pipeline.settings.position_offset == 0
    lengths = list(range(1, max_len + 1))
    np.random.default_rng(3).shuffle(lengths)
    requests = random_requests(reference.config, lengths, lowest_id=5, with_types=False)
    worst = max(packed_diff(engine, reference, requests[i: i + 9]) for i in range(0, len(requests), 9))
    print(f"\n{directory.name} {backend}: token states max abs diff {worst:.3g}")
    assert worst <= TOL


def test_equal_length_batches(case):
    directory, reference = case
    engine = Engine(str(directory), device="cpu", attention_backend="torch_sdpa")
    for n in (1, 7, reference.config.max_position_embeddings):
        requests = random_requests(reference.config, [n] * 5, seed=n, lowest_id=5, with_types=False)
        assert packed_diff(engine, reference, requests) <= TOL


@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_pooled_outputs_match_hf(case, pooling):
    directory, reference = case
    report = assert_matches_hf(directory, TEXTS, hf_model=reference, attention_backends=BACKENDS, pooling=pooling)
    print(f"\n{directory.name} {pooling}: {report}")
    assert set(report) == set(BACKENDS)


def test_masked_lm_checkpoints_load_without_their_head(tmp_path):
    directory = save_random(tmp_path / "mlm", "nomic-odd", seed=2, model_class=NomicBertForMaskedLM,
                            architecture="NomicBertModel")
    reference = NomicBertForMaskedLM.from_pretrained(directory, attn_implementation="eager").nomic_bert.eval()
    assert_matches_hf(directory, TEXTS, hf_model=reference, attention_backends=BACKENDS)


def test_dynamic_rope_is_refused(tmp_path):
    directory = save_random(tmp_path / "dyn", "nomic", rope_parameters={"rope_type": "dynamic", "rope_theta": 1000.0,
                                                                       "factor": 2.0})
    with pytest.raises(ValueError, match="not supported"):
        Engine(str(directory), device="cpu")


@pytest.fixture(scope="module")
def st_dirs(tmp_path_factory):
    """nomic-embed-text-v1.5's files (mean, normalized, search_query/search_document prompts) and gte's (CLS, raw)."""
    base = tmp_path_factory.mktemp("rope-st")
    nomic_st = dict(pooling="mean", normalize=True, max_seq_length=40, prompts=NOMIC_PROMPTS)
    return {"nomic": save_random(base / "nomic", "nomic-odd", seed=3, st=nomic_st),
            "gte": save_random(base / "gte", "gte", seed=4, st=dict(pooling="cls", normalize=False))}


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise cosine similarity."""
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


@pytest.mark.parametrize("name", ["nomic", "gte"])
def test_matches_sentence_transformers(st_dirs, name):
    from sentence_transformers import SentenceTransformer

    directory = st_dirs[name]
    engine = Engine(str(directory), device="cpu")
    reference = SentenceTransformer(str(directory), device="cpu")
    assert engine.pipeline.settings.max_model_len == reference.max_seq_length
    ours, theirs = engine.encode(TEXTS), reference.encode(TEXTS)
    print(f"\n{name}: min cosine {cosines(ours, theirs).min():.7f}, max abs diff {np.abs(ours - theirs).max():.3g}")
    assert cosines(ours, theirs).min() >= 0.99999 and np.abs(ours - theirs).max() <= TOL
    assert np.allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-5) == (name == "nomic")


def test_nomic_prompts_and_matryoshka_match_sentence_transformers(st_dirs):
    from sentence_transformers import SentenceTransformer

    directory = st_dirs["nomic"]
    engine = Engine(str(directory), device="cpu")
    reference = SentenceTransformer(str(directory), device="cpu")
    for name in NOMIC_PROMPTS:
        ours, theirs = engine.encode(TEXTS, prompt_name=name), reference.encode(TEXTS, prompt_name=name)
        assert cosines(ours, theirs).min() >= 0.99999
    for dims in (16, 33):  # nomic-embed-text-v1.5 is trained for 64..768; the truncation is renormalized
        ours = engine.encode(TEXTS, prompt_name="query", dimensions=dims)
        theirs = reference.encode(TEXTS, prompt_name="query", truncate_dim=dims, normalize_embeddings=True)
        assert ours.shape == (len(TEXTS), dims) and cosines(ours, theirs).min() >= 0.99999
        assert np.allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-5)


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
    assert {("NomicBertModel", "embed", "wde-rope-encoders"), ("GteModel", "embed", "wde-rope-encoders")} <= rows
    info = json.loads(wde("inspect", st_dirs["nomic"], "--device", "cpu", "--json").stdout)
    assert (info["architecture"], info["workflow"], info["model_provider"]) == ("NomicBertModel", "embed",
                                                                                 "wde-rope-encoders")
    assert (info["pooling"], info["normalize"], info["max_model_len"]) == ("mean", True, 40)
    for case, pooling in (("nomic-odd", "mean"), ("gte-odd", "cls")):
        arch = CONFIGS[case][0]
        text = wde("inspect", save_random(tmp_path / case, case), "--device", "cpu").stdout
        lines = [" ".join(line.split()) for line in text.splitlines()]
        assert f"pooling: {pooling} (default of wde-rope-encoders)" in lines, text
        assert "max_model_len: 45 (config.json max_position_embeddings)" in lines, text
        assert f"workflow: embed ({arch} is linked to 'embed' for task 'embed' by wde-rope-encoders)" in lines, text



def rewrite_weights(directory, out, tensors):
    """Copy ``directory`` to ``out`` with ``tensors`` as its only checkpoint file."""
    import shutil

    from safetensors.torch import save_file

    shutil.copytree(directory, out)
    (out / "model.safetensors").unlink()
    save_file({k: v.contiguous() for k, v in tensors.items()}, out / "model.safetensors", metadata={"format": "pt"})
    return out


@pytest.mark.parametrize("name", ["nomic-odd", "gte-odd"])
def test_transformers_parameter_names_load(tmp_path, name):
    # save_pretrained writes the remote-code names (encoder.layers.N.attn.Wqkv, fc11, new.*, up_gate_proj, ...),
    # which every other test reads; a state dict saved as is has transformers' names (q_proj, gate_proj, ...)
    directory = save_random(tmp_path / "saved", name, seed=7)
    reference = HF[CONFIGS[name][0]][1].from_pretrained(directory, attn_implementation="eager").eval()
    assert any(".q_proj." in k for k in reference.state_dict())
    renamed = rewrite_weights(directory, tmp_path / "renamed", reference.state_dict())
    report = assert_matches_hf(renamed, TEXTS, hf_model=reference, attention_backends=BACKENDS)
    print(f"\n{name} with transformers' names: {report}")


def test_nomic_remote_code_config_matches_hf(tmp_path):
    """nomic-embed-text-v1.5's config.json keys (n_embd, rotary_emb_base, swiglu, ...) as its remote code reads them."""
    directory = save_random(tmp_path / "native", "nomic-odd", seed=7, max_position_embeddings=2048)
    reference = NomicBertModel.from_pretrained(directory, attn_implementation="eager").eval()
    config = json.loads((directory / "config.json").read_text())
    original = {"n_embd": config["hidden_size"], "n_head": config["num_attention_heads"],
                "n_layer": config["num_hidden_layers"], "n_inner": config["intermediate_size"],
                "layer_norm_epsilon": config["layer_norm_eps"], "rotary_emb_base": 1000, "rotary_emb_fraction": 1.0,
                "activation_function": "swiglu", "prenorm": False, "qkv_proj_bias": False, "n_positions": 8192,
                "max_trained_positions": 2048, "vocab_size": config["vocab_size"], "type_vocab_size": 2,
                "model_type": "nomic_bert", "architectures": ["NomicBertModel"], "rotary_scaling_factor": None}
    (directory / "config.json").write_text(json.dumps(original))
    assert Engine(str(directory), device="cpu").pipeline.settings.max_model_len == 2048  # = max_trained_positions
    report = assert_matches_hf(directory, TEXTS, hf_model=reference, attention_backends=BACKENDS)
    print(f"\nremote-code config: {report}")
    (directory / "config.json").write_text(json.dumps({**original, "rotary_emb_interleaved": True}))
    with pytest.raises(ValueError, match="rotary_emb_interleaved=True is not supported"):
        Engine(str(directory), device="cpu")
