"""A link's ``configure`` proposes settings before the one decision in ``settings.py``: what a model requires
refuses a contradicting engine argument, what it suggests yields to one; the user's ``pooling=`` is never
silently dropped (Qwen3-Reranker, mxbai-rerank-v2 and bge-reranker-v2-gemma require last-token pooling)."""

from __future__ import annotations

import pytest
from transformers import ModernBertConfig, ModernBertForSequenceClassification

from conftest import save_random_reranker
from wde_core import assemble_pipeline
from wde_core.assembly.settings import Proposals
from wde_plugin_kit import save_random_model

LLM_RERANKERS = {  # directory name, family, answer tokens, the words of the pooling reason
    "qwen3": ("Qwen3-Reranker-tiny", "Qwen3", ("yes", "no"), "yes or no"),
    "mxbai": ("mxbai-rerank-tiny-v2", "Qwen2", (), "1 or 0"),
    "bge-gemma": ("bge-reranker-v2-gemma-tiny", "Gemma", ("Yes",), "Yes or No"),
}


@pytest.fixture(scope="module", params=sorted(LLM_RERANKERS))
def llm_reranker(request, tmp_path_factory):
    """A random LLM reranker directory named as the model whose rules it follows, and its pooling reason."""
    name, family, answers, said = LLM_RERANKERS[request.param]
    directory = save_random_reranker(tmp_path_factory.mktemp(request.param) / name, tied=True, family=family,
                                     answers=answers, max_position_embeddings=512)
    return directory, f"last token: the position where the model answers {said}"


def test_an_llm_reranker_refuses_a_pooling_it_cannot_score_with(llm_reranker):
    directory, why = llm_reranker
    with pytest.raises(ValueError, match=r"engine argument pooling='mean' contradicts wde-\S+'s \w+ForCausalLM: "
                                         rf"pooling='last' \({why}\)"):
        assemble_pipeline(str(directory), task="rerank", device="cpu", pooling="mean")
    with pytest.raises(ValueError, match="engine argument normalize=True contradicts"):
        assemble_pipeline(str(directory), task="rerank", device="cpu", normalize=True)


def test_an_llm_reranker_honours_the_pooling_it_requires(llm_reranker):
    directory, why = llm_reranker
    for asked in ("last", None):
        pipeline = assemble_pipeline(str(directory), task="rerank", device="cpu", pooling=asked)
        assert (pipeline.settings.pooling, pipeline.reasons["pooling"]) == ("last", why)
        assert pipeline.settings.causal and pipeline.settings.activation == "sigmoid"
        assert len(pipeline.settings.extras["answer_token_ids"]) in (1, 2)


def test_a_suggested_pooling_yields_to_the_engine_argument(tmp_path):
    config = ModernBertConfig(vocab_size=100, pad_token_id=1, bos_token_id=0, eos_token_id=2, cls_token_id=0,
                              sep_token_id=2, hidden_size=32, num_attention_heads=2, num_hidden_layers=4,
                              intermediate_size=48, max_position_embeddings=64, local_attention=8,
                              global_attn_every_n_layers=3, num_labels=1, initializer_range=0.1,
                              classifier_pooling="cls")
    config.architectures = ["ModernBertForSequenceClassification"]
    directory = save_random_model(tmp_path / "ce", config, model_class=ModernBertForSequenceClassification,
                                  tokenizer="bpe")
    suggested = assemble_pipeline(str(directory), device="cpu")
    assert suggested.settings.pooling == "cls"
    assert suggested.reasons["pooling"].startswith("config.json classifier_pooling (cls)")
    asked = assemble_pipeline(str(directory), device="cpu", pooling="mean")
    assert (asked.settings.pooling, asked.reasons["pooling"]) == ("mean", "engine argument pooling")


def test_configure_may_propose_only_known_settings():
    with pytest.raises(ValueError, match="configure proposed 'max_len', not a setting it may propose"):
        Proposals().suggest("max_len", 8, "a typo")
