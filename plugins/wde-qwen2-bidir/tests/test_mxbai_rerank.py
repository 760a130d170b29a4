"""mxbai-rerank-v2 as an LLM reranker: a random-weight ``Qwen2ForCausalLM`` scored by wde against the
mxbai-rerank package itself (``MxbaiRerankV2.predict``: its prompt layout, HF logits of "1" minus "0")."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from wde_plugin_kit.cpu_info import CPU_BACKENDS
from wde_plugin_kit.decoders import save_random_reranker
from wde_core import Engine

PAIRS = [("what is a panda?", "The giant panda is a bear native to China."),
         ("what is a panda?", "Paris is the capital of France."),
         ("how do rotary embeddings work", "RoPE rotates query and key vectors by angles that depend on position."),
         ("1 or 0", "0")]


@pytest.fixture(scope="module", params=["untied", "tied"])
def mxbai_dir(request, tmp_path_factory):
    """A random ``Qwen2ForCausalLM`` named like mxbai-rerank-v2, its tokenizer with the chat tokens."""
    directory = tmp_path_factory.mktemp(request.param) / "mxbai-rerank-tiny-v2"
    return save_random_reranker(directory, tied=request.param == "tied", seed=5, family="Qwen2", answers=(),
                                max_position_embeddings=512)  # room for the package's long task prompt


def reference_logits(directory, instruction=None) -> np.ndarray:
    """The mxbai-rerank package's raw scores (logit "1" - logit "0") for ``PAIRS``."""
    from mxbai_rerank import MxbaiRerankV2

    reranker = MxbaiRerankV2(str(directory), device="cpu", torch_dtype=torch.float32, attn_implementation="eager")
    reranker.tokenizer.prepare_for_model = _prepare_for_model  # removed in transformers 5
    queries, documents = zip(*PAIRS)
    return reranker.predict(list(queries), list(documents), instruction=instruction).numpy()


def _prepare_for_model(ids, pair_ids, *, add_special_tokens, max_length, **_):
    """transformers 4's ``prepare_for_model`` for what the package asks of it here: the two id lists joined,
    no special tokens, no truncation needed (the pairs are short)."""
    assert add_special_tokens is False and len(ids) + len(pair_ids) <= max_length
    return {"input_ids": ids + pair_ids}


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_scores_match_the_mxbai_rerank_package(mxbai_dir, backend):
    expected = reference_logits(mxbai_dir)
    with Engine(str(mxbai_dir), task="rerank", attention_backend=backend) as engine:
        assert engine.pipeline.workflow.name == "mxbai-rerank"
        assert "'mxbai-rerank' in" in engine.pipeline.reasons["workflow"]
        raw, scores = engine.score(PAIRS, raw_scores=True), engine.score(PAIRS)
    assert np.abs(np.asarray(raw) - expected).max() <= 1e-4
    np.testing.assert_allclose(scores, 1 / (1 + np.exp(-expected)), atol=1e-5)


def test_the_instruction_engine_argument_matches_the_package(mxbai_dir):
    expected = reference_logits(mxbai_dir, instruction="judge biology answers")
    with Engine(str(mxbai_dir), task="rerank", instruction="judge biology answers") as engine:
        raw = engine.score(PAIRS, raw_scores=True)
    assert np.abs(np.asarray(raw) - expected).max() <= 1e-4


def test_long_pairs_are_cut_to_fit_or_refused(mxbai_dir):
    pair = [("panda " * 300, "bear " * 600)]
    with Engine(str(mxbai_dir), task="rerank", max_model_len=256) as engine:
        request, = engine.prepare("score", pair).requests
        tokenizer = engine.tokenizer
        assert request.num_tokens <= 256  # the query keeps at most 3/4 of the room, the document the rest
        assert request.token_ids[: len(tokenizer.prefix)] == tokenizer.prefix
        assert request.token_ids[-len(tokenizer.tail):] == tokenizer.tail
        assert 0 <= engine.score(pair)[0] <= 1
        with pytest.raises(ValueError, match="more than max_model_len=256"):
            engine.score(pair, truncate=False)


def test_without_the_rerank_task_it_embeds_as_a_decoder(mxbai_dir):
    with pytest.raises(LookupError, match="serves several tasks"):
        Engine(str(mxbai_dir))
    with Engine(str(mxbai_dir), task="embed") as engine:
        assert engine.pipeline.workflow.name == "decoder-embed"


def test_the_variant_engine_argument_forces_it_for_a_renamed_directory(mxbai_dir, tmp_path):
    import shutil

    renamed = shutil.copytree(mxbai_dir, tmp_path / "my-reranker")
    with pytest.raises(LookupError, match="no installed plugin serves architecture Qwen2ForCausalLM for task 'rerank'"):
        Engine(str(renamed), task="rerank")
    with Engine(str(renamed), variant="mxbai-rerank-v2") as forced, Engine(str(mxbai_dir), task="rerank") as named:
        assert forced.pipeline.reasons["workflow"].startswith("Qwen2ForCausalLM (engine argument variant=")
        np.testing.assert_allclose(forced.score(PAIRS), named.score(PAIRS), atol=1e-6)
    with pytest.raises(LookupError, match=r"variant='nope': Qwen2ForCausalLM has no such variant \(variants: "
                                          r"'mxbai-rerank-v2'\)"):
        Engine(str(renamed), variant="nope")
