"""Qwen3-Reranker as an LLM yes/no reranker: random-weight ``Qwen3ForCausalLM`` against HF's logits on
the model card's formatted prompt, fp32, both CPU backends, tied and untied heads."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from wde_plugin_kit.cpu_info import CPU_BACKENDS
from wde_plugin_kit.decoders import RERANKER_CONFIG as CONFIG, save_random_reranker
from wde_core import Engine, assemble_pipeline
from wde_core.cli.main import cli
from wde_qwen2_bidir.prompts import qwen3_rerank_text

BACKENDS = CPU_BACKENDS
TOL = 1e-4
PAIRS = [("what is a panda?", "The giant panda is a bear native to China."),
         ("what is a panda?", "Paris is the capital of France."),
         ("how do rotary embeddings work", "RoPE rotates query and key vectors by angles that depend on position."),
         ("yes or no", "no")]
# The reference prompt, written out as Qwen3-Reranker's model card gives it (huggingface.co/Qwen/Qwen3-Reranker-0.6B,
# "Transformers Usage"), sharing nothing with the plugin: prefix + format_instruction(...) + suffix, tokenized apart.
CARD_PREFIX = ("<|im_start|>system\nJudge whether the Document meets the requirements based on the Query and the "
               "Instruct provided. Note that the answer can only be \"yes\" or \"no\".<|im_end|>\n<|im_start|>user\n")
CARD_SUFFIX = "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
CARD_TASK = "Given a web search query, retrieve relevant passages that answer the query"


def format_instruction(instruction, query, doc):
    """The model card's ``format_instruction``."""
    if instruction is None:
        instruction = CARD_TASK
    return "<Instruct>: {instruction}\n<Query>: {query}\n<Document>: {doc}".format(
        instruction=instruction, query=query, doc=doc)


@pytest.fixture(scope="module", params=["untied", "tied"])
def reranker_case(request, tmp_path_factory):
    """A saved random Qwen3-Reranker-named directory, the HF causal LM and its tokenizer."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    directory = tmp_path_factory.mktemp(request.param) / "Qwen3-Reranker-tiny"
    save_random_reranker(directory, tied=request.param == "tied", seed=11)
    reference = AutoModelForCausalLM.from_pretrained(directory, attn_implementation="eager", dtype=torch.float32)
    return directory, reference.eval(), AutoTokenizer.from_pretrained(directory)


def hf_yes_minus_no(reference, tokenizer, query, document, instruction=None) -> float:
    """HF's logit("yes") - logit("no") at the last token of the prompt built as the model card does."""
    prefix = tokenizer.encode(CARD_PREFIX, add_special_tokens=False)
    suffix = tokenizer.encode(CARD_SUFFIX, add_special_tokens=False)
    body = tokenizer(format_instruction(instruction, query, document), add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        logits = reference(input_ids=torch.tensor([prefix + body + suffix])).logits[0, -1]
    yes, no = tokenizer.convert_tokens_to_ids("yes"), tokenizer.convert_tokens_to_ids("no")
    return float(logits[yes] - logits[no])


@pytest.mark.parametrize("backend", BACKENDS)
def test_scores_match_hf_logits(reranker_case, backend):
    directory, reference, tokenizer = reranker_case
    engine = Engine(str(directory), task="rerank", device="cpu", attention_backend=backend)
    assert engine.pipeline.workflow.name == "llm-rerank"
    expected_raw = np.array([hf_yes_minus_no(reference, tokenizer, q, d) for q, d in PAIRS])
    raw = engine.score(PAIRS, raw_scores=True)
    scores = engine.score(PAIRS)
    print(f"{directory.parent.name} {backend}: raw max abs diff {np.abs(raw - expected_raw).max():.2e}, "
          f"score {np.abs(scores - 1 / (1 + np.exp(-expected_raw))).max():.2e}")
    assert np.abs(raw - expected_raw).max() <= TOL
    assert np.abs(scores - 1 / (1 + np.exp(-expected_raw))).max() <= TOL
    assert np.abs(expected_raw).max() > 1e-3  # the scores are not trivially equal


def test_instruction_and_prompt_text(reranker_case):
    directory, reference, tokenizer = reranker_case
    task = "Given a question, find the passage about animals"
    engine = Engine(str(directory), task="rerank", device="cpu", instruction=task)
    expected = np.array([hf_yes_minus_no(reference, tokenizer, q, d, task) for q, d in PAIRS])
    assert np.abs(engine.score(PAIRS, raw_scores=True) - expected).max() <= TOL
    ranked = engine.rerank(PAIRS[0][0], [d for _, d in PAIRS])
    assert sorted(r["index"] for r in ranked) == [0, 1, 2, 3]
    assert qwen3_rerank_text("q", "d") == CARD_PREFIX + format_instruction(None, "q", "d") + CARD_SUFFIX
    assert qwen3_rerank_text("q", "d", task) == CARD_PREFIX + format_instruction(task, "q", "d") + CARD_SUFFIX


def test_only_two_head_rows_are_kept(reranker_case):
    directory, _, tokenizer = reranker_case
    engine = Engine(str(directory), task="rerank", device="cpu")
    model = engine.executor.worker.model
    assert tuple(model.answer_rows.shape) == (2, CONFIG["hidden_size"]) and not hasattr(model, "lm_head")
    assert engine.pipeline.settings.extras["answer_token_ids"] == [tokenizer.convert_tokens_to_ids(t)
                                                                   for t in ("yes", "no")]


def test_task_rerank_forces_it_and_inspect_shows_it(isolated_host, reranker_case):
    directory, _, _ = reranker_case
    with pytest.raises(Exception, match="serves several tasks .*embed, rerank.*pass task="):
        assemble_pipeline(str(directory), device="cpu")
    assert assemble_pipeline(str(directory), device="cpu", task="embed").workflow.name == "decoder-embed"
    isolated_host.register_commands(cli)
    result = CliRunner().invoke(cli, ["inspect", str(directory), "--device", "cpu", "--json",
                                      "--task", "rerank"])
    assert result.exit_code == 0, result.output
    info = json.loads(result.stdout)
    assert (info["workflow"], info["task"]) == ("llm-rerank", "rerank")
    assert "LLM yes/no reranker ('qwen3-reranker'" in info["reasons"]["workflow"]
    assert "sigmoid(logit('yes') - logit('no'))" in info["reasons"]["activation"]
    assert "common leading tokens once per batch" in info["reasons"]["shared_prefix"]
