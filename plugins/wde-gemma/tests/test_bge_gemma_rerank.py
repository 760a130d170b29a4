"""bge-reranker-v2-gemma as an LLM reranker: a random-weight ``GemmaForCausalLM`` scored by wde against HF's
logit of "Yes" on the pair laid out as FlagEmbedding's ``FlagLLMReranker.compute_score`` does (FlagEmbedding
1.4.2 itself does not import under transformers 5, so its layout is restated here from its source)."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch

from wde_plugin_kit.cpu_info import CPU_BACKENDS
from wde_plugin_kit.decoders import DECODER_VOCAB as VOCAB, write_decoder_tokenizer
from wde_core import Engine

PAIRS = [("what is a panda?", "The giant panda is a bear native to China."),
         ("what is a panda?", "Paris is the capital of France."),
         ("how do rotary embeddings work", "RoPE rotates query and key vectors by angles that depend on position."),
         ("Yes or No", "No")]
PROMPT = ("Given a query A and a passage B, determine whether the passage contains an answer to the query by "
          "providing a prediction of either 'Yes' or 'No'.")


@pytest.fixture(scope="module", params=["tied", "untied"])
def gemma_reranker(request, tmp_path_factory):
    """A random ``GemmaForCausalLM`` named like bge-reranker-v2-gemma; its tokenizer has <bos> and "Yes"."""
    from transformers import AutoModelForCausalLM, AutoTokenizer, GemmaConfig, GemmaForCausalLM

    directory = tmp_path_factory.mktemp(request.param) / "bge-reranker-v2-gemma-tiny"
    config = GemmaConfig(vocab_size=VOCAB + 8, hidden_size=64, intermediate_size=96, num_hidden_layers=3,
                         num_attention_heads=4, num_key_value_heads=1, head_dim=32, max_position_embeddings=256,
                         tie_word_embeddings=request.param == "tied", bos_token_id=VOCAB, pad_token_id=1)
    torch.manual_seed(9)
    model = GemmaForCausalLM(config).eval()
    with torch.no_grad():  # HF starts Gemma's (1 + w) norm weights at zero
        for name, param in model.named_parameters():
            if "norm" in name:
                param.add_(torch.randn_like(param) * 0.3)
    model.save_pretrained(directory)
    write_decoder_tokenizer(directory)
    tokenizer = AutoTokenizer.from_pretrained(directory)
    tokenizer.add_special_tokens({"bos_token": "<bos>"})
    tokenizer.add_tokens(["Yes"])
    tokenizer.save_pretrained(directory)
    reference = AutoModelForCausalLM.from_pretrained(directory, attn_implementation="eager", dtype=torch.float32)
    return directory, reference.eval(), AutoTokenizer.from_pretrained(directory)


def flag_llm_reranker_logits(reference, tokenizer, pairs, prompt=PROMPT) -> np.ndarray:
    """FlagLLMReranker.compute_score's layout (no truncation needed here) and HF's logit of "Yes" at the end."""
    def ids(text):
        return tokenizer(text, add_special_tokens=False)["input_ids"]

    yes = ids("Yes")[0]
    scores = []
    for query, passage in pairs:
        bos = [tokenizer.bos_token_id] if tokenizer.bos_token_id != tokenizer.pad_token_id else []
        input_ids = bos + ids(f"A: {query}") + ids("\n") + ids(f"B: {passage}") + ids("\n") + ids(prompt)
        with torch.no_grad():
            scores.append(float(reference(input_ids=torch.tensor([input_ids])).logits[0, -1, yes]))
    return np.array(scores)


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_scores_match_hf_on_flagembeddings_layout(gemma_reranker, backend):
    directory, reference, tokenizer = gemma_reranker
    expected = flag_llm_reranker_logits(reference, tokenizer, PAIRS)
    with Engine(str(directory), attention_backend=backend) as engine:  # the only task GemmaForCausalLM serves
        assert engine.pipeline.workflow.name == "bge-gemma-rerank"
        raw, scores = engine.score(PAIRS, raw_scores=True), engine.score(PAIRS)
    assert np.abs(np.asarray(raw) - expected).max() <= 1e-4
    np.testing.assert_allclose(scores, 1 / (1 + np.exp(-expected)), atol=1e-5)


def test_instruction_replaces_the_prompt_and_variant_forces_a_renamed_copy(gemma_reranker, tmp_path):
    directory, reference, tokenizer = gemma_reranker
    expected = flag_llm_reranker_logits(reference, tokenizer, PAIRS, prompt="Is B about A? Yes or No.")
    renamed = shutil.copytree(directory, tmp_path / "my-reranker")
    with Engine(str(renamed), variant="bge-reranker-v2-gemma", instruction="Is B about A? Yes or No.") as engine:
        raw = engine.score(PAIRS, raw_scores=True)
    assert np.abs(np.asarray(raw) - expected).max() <= 1e-4


def test_long_pairs_are_cut_to_fit_or_refused(gemma_reranker):
    directory, _, _ = gemma_reranker
    pair = [("panda " * 300, "bear " * 600)]
    with Engine(str(directory), max_model_len=128) as engine:
        request, = engine.prepare("score", pair).requests
        assert request.num_tokens <= 128 and request.token_ids[-len(engine.tokenizer.tail):] == engine.tokenizer.tail
        assert request.token_ids[0] == engine.tokenizer.tokenizer.bos_token_id
        with pytest.raises(ValueError, match="more than max_model_len=128"):
            engine.score(pair, truncate=False)


def test_list_workflows_and_inspect_explain_the_llm_rerankers(gemma_reranker, isolated_host):
    import json

    from click.testing import CliRunner

    from wde_core.cli.main import cli

    isolated_host.register_commands(cli)
    runner = CliRunner()
    listed = runner.invoke(cli, ["list-workflows"])
    assert listed.exit_code == 0, listed.output
    rows = {tuple(line.split()) for line in listed.stdout.splitlines()}  # architecture, task, [variant,] plugin
    assert {("Gemma3TextModel", "embed", "wde-gemma"),
            ("GemmaForCausalLM", "rerank", "bge-reranker-v2-gemma", "wde-gemma"),
            ("Qwen2ForCausalLM", "rerank", "mxbai-rerank-v2", "wde-qwen2-bidir"),
            ("GteForSequenceClassification", "rerank", "single-logit", "wde-rope-encoders"),
            ("NomicBertForSequenceClassification", "classify", "several-labels", "wde-rope-encoders")} <= rows
    directory, _, _ = gemma_reranker
    info = json.loads(runner.invoke(cli, ["inspect", str(directory), "--json"]).stdout)
    assert info["workflow"] == "bge-gemma-rerank"
    assert "('bge-reranker-v2-gemma' in" in info["reasons"]["workflow"]
    assert info["reasons"]["activation"].startswith("sigmoid(logit('Yes')) at the last token (token id ")
