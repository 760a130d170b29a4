"""Qwen3 embedders (Qwen3-Embedding): random-weight ``Qwen3Model``/``Qwen3ForCausalLM`` against HF, fp32,
causal, both CPU backends, packed mixed lengths; last-token pooling; the instruct prompt against
sentence-transformers on the same saved model."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from transformers import AutoTokenizer

from decoder_fixtures import (VOCAB, hf_states, load_reference, random_token_lists, wde_states,
                              write_decoder_tokenizer)
from wde_plugin_kit.cpu_info import CPU_BACKENDS
from wde_core import Engine, assemble_pipeline
from wde_qwen2_bidir.prompts import qwen3_query_prompt

BACKENDS = CPU_BACKENDS
TOL = 1e-4
# Qwen3-Embedding's query prompt as its config_sentence_transformers.json gives it (huggingface.co/Qwen/
# Qwen3-Embedding-0.6B), written out: the reference side must not share the plugin's qwen3_query_prompt
CARD_QUERY_PROMPT = "Instruct: Given a web search query, retrieve relevant passages that answer the query\nQuery:"
LENGTHS = [1, 2, 7, 64, 13, 40, 3, 29, 64, 18]
# name -> (class saved, config): GQA in both; head_dim not hidden/heads; the second of odd sizes with biases
CONFIGS = {
    "base": ("Qwen3Model", dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                                intermediate_size=96)),
    "odd": ("Qwen3ForCausalLM", dict(hidden_size=45, num_attention_heads=3, num_key_value_heads=1, head_dim=14,
                                     intermediate_size=77, attention_bias=True, rms_norm_eps=1e-5,
                                     rope_parameters={"rope_type": "default", "rope_theta": 5e4})),
}


def save_random_qwen3(directory, name: str, *, seed: int = 0, st_files: bool = False, **overrides):
    """Save a random-weight Qwen3 (norm weights and biases random too) with the tiny BPE tokenizer."""
    import transformers

    class_name, config = CONFIGS[name]
    config = {**config, "vocab_size": VOCAB, "num_hidden_layers": 2, "max_position_embeddings": 64,
              "tie_word_embeddings": False, **overrides}
    torch.manual_seed(seed)
    model = getattr(transformers, class_name)(transformers.Qwen3Config(**config)).eval()
    with torch.no_grad():
        for param_name, param in model.named_parameters():
            if param_name.endswith(("norm.weight", ".bias")):
                param.add_(torch.randn_like(param) * 0.1)
    model.save_pretrained(directory)
    write_decoder_tokenizer(directory)
    if st_files:
        write_st_files(directory)
    return directory


def write_st_files(directory) -> None:
    """Qwen3-Embedding's sentence-transformers files: last-token pooling, Normalize, query prompt."""
    (directory / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}]))
    (directory / "1_Pooling").mkdir()
    (directory / "1_Pooling" / "config.json").write_text(json.dumps(
        {"word_embedding_dimension": 64, "pooling_mode_lasttoken": True, "include_prompt": True}))
    (directory / "2_Normalize").mkdir()
    (directory / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 64, "do_lower_case": False}))
    (directory / "config_sentence_transformers.json").write_text(json.dumps(
        {"prompts": {"query": CARD_QUERY_PROMPT, "document": ""}, "default_prompt_name": None,
         "similarity_fn_name": "cosine"}))


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def qwen3_case(request, tmp_path_factory):
    """A saved random Qwen3 directory and the HF base model loaded from it."""
    directory = save_random_qwen3(tmp_path_factory.mktemp(request.param), request.param, seed=5)
    return directory, load_reference(directory)


def test_qwen3_links_to_the_decoder_workflow(qwen3_case):
    directory, reference = qwen3_case
    assert type(reference).__name__ == "Qwen3Model"
    pipeline = assemble_pipeline(str(directory), device="cpu")
    assert pipeline.workflow.name == "decoder-embed"
    assert (pipeline.settings.pooling, pipeline.settings.normalize, pipeline.settings.causal) == ("last", True, True)


@pytest.mark.parametrize("backend", BACKENDS)
def test_token_states_match_hf_on_packed_batches(qwen3_case, backend):
    directory, reference = qwen3_case
    engine = Engine(str(directory), device="cpu", attention_backend=backend)
    tokens = random_token_lists(LENGTHS, seed=1)
    worst = 0.0
    for chunk in (tokens[:5], tokens[5:]):  # packed batches of mixed lengths, positions restarting at 0
        for ours, ids in zip(wde_states(engine, chunk), chunk):
            theirs = hf_states(reference, ids, bidirectional=False)
            assert ours.shape == theirs.shape
            worst = max(worst, (ours - theirs).abs().max().item())
    print(f"{directory.name} {backend}: token states max abs diff {worst:.2e}")
    assert worst <= TOL


def test_qk_norms_matter(qwen3_case):
    """The q/k head norms really change the result (else parity would not prove they are applied)."""
    directory, reference = qwen3_case
    ids = random_token_lists([12], seed=2)[0]
    expected = hf_states(reference, ids, bidirectional=False)
    with torch.no_grad():
        for layer in reference.layers:
            layer.self_attn.q_norm.weight.fill_(1.0)
    try:
        assert (hf_states(reference, ids, bidirectional=False) - expected).abs().max().item() > 1e-3
    finally:
        reference.load_state_dict(load_reference(directory).state_dict())


@pytest.mark.parametrize("backend", BACKENDS)
def test_last_token_pooled_outputs_match_hf(qwen3_case, backend):
    directory, reference = qwen3_case
    tokenizer = AutoTokenizer.from_pretrained(directory)
    texts = ["a", "Hello world, this is wde.", "word " * 30, "Odd lengths: 1 22 333 4444 55555 !?"]
    engine = Engine(str(directory), device="cpu", attention_backend=backend)
    token_lists = [tokenizer(t, truncation=True, max_length=64)["input_ids"] for t in texts]
    for normalize in (False, True):
        expected = torch.stack([hf_states(reference, ids, bidirectional=False)[-1] for ids in token_lists])
        if normalize:
            expected = torch.nn.functional.normalize(expected, dim=-1)
        ours = engine.encode(texts, normalize=normalize)
        diff = np.abs(ours - expected.numpy()).max()
        print(f"{directory.name} {backend} normalize={normalize}: pooled max abs diff {diff:.2e}")
        assert diff <= TOL


def test_instruct_prompt_matches_sentence_transformers(tmp_path):
    sentence_transformers = pytest.importorskip("sentence_transformers")
    directory = save_random_qwen3(tmp_path / "qwen3-st", "base", seed=7, st_files=True)
    st = sentence_transformers.SentenceTransformer(str(directory), device="cpu")
    engine = Engine(str(directory), device="cpu")
    assert engine.pipeline.settings.prompts["query"] == CARD_QUERY_PROMPT
    queries = ["how do rotary embeddings work", "what is a panda?"]
    documents = ["RoPE rotates query and key vectors by position-dependent angles.", "The giant panda is a bear."]
    for texts, prompt_name in ((queries, "query"), (documents, None)):
        theirs = st.encode(texts, prompt_name=prompt_name, convert_to_numpy=True)
        ours = engine.encode(texts, prompt_name=prompt_name)
        cosines = (ours * theirs).sum(-1) / np.linalg.norm(ours, axis=-1) / np.linalg.norm(theirs, axis=-1)
        print(f"sentence-transformers prompt_name={prompt_name}: min cosine {cosines.min():.7f}")
        assert cosines.min() >= 0.99999
    task = "Find the animal"
    ours = engine.encode(queries, prompt=qwen3_query_prompt(task))
    theirs = st.encode(queries, prompt=f"Instruct: {task}\nQuery:", convert_to_numpy=True)
    assert np.abs(ours - theirs).max() <= TOL
