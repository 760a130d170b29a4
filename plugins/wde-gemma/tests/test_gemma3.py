"""Gemma 3 text as a bidirectional embedder (EmbeddingGemma style) vs HF ``Gemma3TextModel`` and
sentence-transformers (mean pooling, two Dense projections, Normalize)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import AutoModel, Gemma3TextConfig

from wde_plugin_kit.cpu_info import CPU_BACKENDS
from wde_plugin_kit.packed import packed_diff, random_requests
from wde_core import Engine
from wde_plugin_kit import save_random_model

LENGTHS = [3, 9, 17, 30, 6, 1, 2, 64]  # longer than the windows (4, 5), so local layers differ from global ones
ODD = dict(hidden_size=72, intermediate_size=100, num_hidden_layers=3, num_attention_heads=3, num_key_value_heads=1,
           head_dim=24, query_pre_attn_scalar=24, sliding_window=5,
           layer_types=["sliding_attention", "sliding_attention", "full_attention"])
TEXTS = ["a short one", "sliding windows let local layers see only their neighbours on each side",
         "EmbeddingGemma pools the mean, projects it twice and normalizes", "x y z " * 12]


def _config(bidirectional: bool = True, **overrides) -> Gemma3TextConfig:
    config = dict(vocab_size=300, hidden_size=64, intermediate_size=96, num_hidden_layers=4, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=16, query_pre_attn_scalar=16, sliding_window=4,
                  max_position_embeddings=128, use_bidirectional_attention=bidirectional,
                  layer_types=["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
                  rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 1_000_000.0},
                                   "sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0}})
    config.update(overrides)
    return Gemma3TextConfig(**config, architectures=["Gemma3TextModel"])


def _perturb_norms(directory) -> None:
    """HF initialises Gemma's norm weights at zero; give them random values so ``1 + w`` is exercised."""
    model = AutoModel.from_pretrained(str(directory), dtype=torch.float32)
    gen = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" in name:
                param.copy_(torch.randn(param.shape, generator=gen) * 0.3)
    model.save_pretrained(str(directory), safe_serialization=True)


@pytest.fixture(scope="module", params=["bidirectional", "causal", "odd-bidirectional"])
def gemma_dir(request, tmp_path_factory):
    config = _config(request.param != "causal", **(ODD if request.param.startswith("odd") else {}))
    directory = save_random_model(tmp_path_factory.mktemp("gemma3"), config, tokenizer="bpe")
    _perturb_norms(directory)
    return directory


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_packed_token_states_match_hf(gemma_dir, backend):
    reference = AutoModel.from_pretrained(str(gemma_dir), attn_implementation="eager", dtype=torch.float32).eval()
    with Engine(str(gemma_dir), attention_backend=backend, pooling="mean") as engine:
        bidirectional = reference.config.use_bidirectional_attention
        assert engine.pipeline.settings.causal is not bidirectional
        diff = packed_diff(engine, reference, random_requests(reference.config, LENGTHS, lowest_id=5), pad_id=1)
    assert diff < 1e-4


def test_embeddinggemma_layout_matches_sentence_transformers(tmp_path):
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Dense, Normalize, Pooling, Transformer

    directory = save_random_model(tmp_path / "gemma", _config(), tokenizer="bpe")
    _perturb_norms(directory)
    torch.manual_seed(5)
    reference = SentenceTransformer(modules=[
        Transformer(str(directory), max_seq_length=128), Pooling(64, "mean"),
        Dense(64, 192, bias=False, activation_function=None), Dense(192, 64, bias=False, activation_function=None),
        Normalize()], device="cpu")
    reference.save(str(tmp_path / "st"))
    expected = reference.encode(TEXTS, convert_to_numpy=True)
    with Engine(str(tmp_path / "st")) as engine:
        got = np.stack(engine.encode(TEXTS))
        truncated = np.stack(engine.encode(TEXTS, dimensions=32))
    np.testing.assert_allclose(got, expected, atol=1e-5)
    # Matryoshka: the first 32 dimensions, renormalized
    head = expected[:, :32] / np.linalg.norm(expected[:, :32], axis=1, keepdims=True)
    np.testing.assert_allclose(truncated, head, atol=1e-5)


def test_unsupported_rope_and_softcapping_are_refused(tmp_path):
    linear = {"full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6},
              "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}}
    directory = save_random_model(tmp_path / "linear", _config(rope_parameters=linear), tokenizer="bpe")
    with pytest.raises(ValueError, match="not supported by wde-gemma"):
        Engine(str(directory)).encode(["x"])
    directory = save_random_model(tmp_path / "softcap", _config(attn_logit_softcapping=50.0), tokenizer="bpe")
    with pytest.raises(ValueError, match="attn_logit_softcapping"):
        Engine(str(directory)).encode(["x"])
