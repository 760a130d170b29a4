"""The plugin authors' kit (``wde_plugin_kit``): tokenizers, sentence-transformers files, the plugin host, parity."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from transformers import AutoTokenizer, BertConfig, BertModel

from wde_core import Engine
from wde_core.plugin_api import ArchitectureLink, hookimpl
from wde_core import get_plugin_host
from wde_plugin_kit import (PluginProblemError, assert_matches_hf, bpe_tokenizer, plugin_host, save_random_model,
                            wordpiece_tokenizer, write_st_files)

TEXTS = ["hello world", "a", "What is the capital of France?", "The quick brown fox jumps over the lazy dog. " * 9]


def tiny_bert_config(**overrides) -> BertConfig:
    """A 2-layer, 32-wide BERT config."""
    values = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                  max_position_embeddings=48, type_vocab_size=2)
    values.update(overrides)
    return BertConfig(**values)


@pytest.fixture(scope="module")
def random_bert(tmp_path_factory):
    """A tiny random BERT with the kit's WordPiece tokenizer (CLS pooling: no sentence-transformers files)."""
    return save_random_model(tmp_path_factory.mktemp("kit-bert"), tiny_bert_config(), seed=3)


def test_wordpiece_tokenizer_round_trips_special_tokens_and_pairs(tmp_path):
    size = wordpiece_tokenizer(tmp_path)
    assert {"tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"} <= {
        p.name for p in tmp_path.iterdir()}
    vocab = (tmp_path / "vocab.txt").read_text(encoding="utf-8").splitlines()
    assert len(vocab) == size and vocab[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tok = AutoTokenizer.from_pretrained(tmp_path)
    single = tok("Hello, world of tokenizers!")
    tokens = tok.convert_ids_to_tokens(single["input_ids"])
    assert tokens[0] == "[CLS]" and tokens[-1] == "[SEP]" and "[UNK]" not in tokens
    assert tok.decode(single["input_ids"], skip_special_tokens=True) == "hello, world of tokenizers!"
    pair = tok("first text", "second one")
    tokens = tok.convert_ids_to_tokens(pair["input_ids"])
    assert tokens == ["[CLS]", "first", "text", "[SEP]", "second", "one", "[SEP]"]
    assert pair["token_type_ids"] == [0, 0, 0, 0, 1, 1, 1]
    special_ids = (tok.pad_token_id, tok.unk_token_id, tok.cls_token_id, tok.sep_token_id, tok.mask_token_id)
    assert special_ids == (0, 1, 2, 3, 4)
    cased = wordpiece_tokenizer(tmp_path / "cased", lowercase=False)
    assert cased > size and "Q" in AutoTokenizer.from_pretrained(tmp_path / "cased").tokenize("Q")


def test_bpe_tokenizer_is_roberta_shaped_and_deterministic(tmp_path):
    size = bpe_tokenizer(tmp_path / "a")
    assert size == bpe_tokenizer(tmp_path / "b") and size > 300
    assert (tmp_path / "a" / "tokenizer.json").read_bytes() == (tmp_path / "b" / "tokenizer.json").read_bytes()
    tok = AutoTokenizer.from_pretrained(tmp_path / "a")
    assert [tok.convert_tokens_to_ids(t) for t in ("<s>", "<pad>", "</s>", "<unk>")] == [0, 1, 2, 3]
    text = "Hello, World! Tokenizers work."
    ids = tok(text)["input_ids"]
    assert ids[0] == 0 and ids[-1] == 2 and tok.decode(ids, skip_special_tokens=True) == text
    a, b = tok("first")["input_ids"], tok("second")["input_ids"]
    assert tok("first", "second")["input_ids"] == a + [2] + b[1:]  # <s> A </s></s> B </s>


@pytest.mark.parametrize("st", [
    dict(pooling="mean", normalize=True, max_seq_length=32, prompts={"query": "query: "},
         default_prompt_name="query", include_prompt=False),
    dict(pooling="cls", normalize=False),
    dict(pooling="max", normalize=True, prompts={"query": "query: ", "passage": "passage: "}),
], ids=["mean-prompt", "cls", "max"])
def test_st_files_load_in_sentence_transformers_and_match_wde(tmp_path, st):
    from sentence_transformers import SentenceTransformer

    directory = save_random_model(tmp_path, tiny_bert_config(), seed=5, st=st)
    model = SentenceTransformer(str(directory), device="cpu")
    pooling = model[1].get_config_dict()
    assert pooling["pooling_mode"] == st["pooling"]
    assert pooling["include_prompt"] == st.get("include_prompt", True)
    assert (type(model[-1]).__name__ == "Normalize") == st["normalize"]
    assert {k: v for k, v in model.prompts.items() if v} == st.get("prompts", {})
    assert model.default_prompt_name == st.get("default_prompt_name")
    if "max_seq_length" in st:
        assert model.max_seq_length == st["max_seq_length"]
    expected = model.encode(TEXTS, convert_to_numpy=True)
    with Engine(str(directory), device="cpu", dtype="float32") as engine:
        assert engine.pipeline.settings.pooling == st["pooling"]
        assert engine.pipeline.settings.normalize == st["normalize"]
        got = engine.encode(TEXTS)
    np.testing.assert_allclose(got, expected, atol=1e-4, rtol=0)


def test_write_st_files_writes_every_pooling_key(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 8}))
    write_st_files(tmp_path, pooling="last", normalize=False, include_prompt=False)
    pooling = json.loads((tmp_path / "1_Pooling" / "config.json").read_text())
    assert pooling["word_embedding_dimension"] == 8 and pooling["pooling_mode_lasttoken"] is True
    assert not pooling["pooling_mode_mean_tokens"] and pooling["include_prompt"] is False
    assert [m["path"] for m in json.loads((tmp_path / "modules.json").read_text())] == ["", "1_Pooling"]
    with pytest.raises(ValueError, match="pooling"):
        write_st_files(tmp_path, pooling="median")
    with pytest.raises(ValueError, match="default_prompt_name"):
        write_st_files(tmp_path, prompts={"a": "a: "}, default_prompt_name="b")


class KitDemoPlugin:
    """An in-process plugin linking a made-up architecture to wde-bert's encoder."""

    @hookimpl
    def wde_register_architectures(self, register):
        """KitDemoModel embeds like BERT, mean pooling."""
        register(ArchitectureLink(architecture="KitDemoModel", task="embed", workflow="embed",
                                  model="wde_bert.model:BertEncoder", defaults={"pooling": "mean", "normalize": False}))


def test_plugin_host_loads_an_in_process_plugin_and_restores_the_previous_host(tmp_path):
    pytest.importorskip("wde_bert")
    config = tiny_bert_config()
    config.architectures = ["KitDemoModel"]
    directory = save_random_model(tmp_path, config, model_class=BertModel)
    assert json.loads((directory / "config.json").read_text())["architectures"] == ["KitDemoModel"]
    previous = get_plugin_host()
    with plugin_host(("kit-demo", KitDemoPlugin()), use_entry_points=False) as host:
        assert get_plugin_host() is host and host is not previous
        assert "kit-demo" in host.plugins
        with Engine(str(directory), device="cpu") as engine:
            assert engine.pipeline.settings.pooling == "mean"
            assert engine.encode("hello").shape == (32,)
    assert get_plugin_host() is previous
    with pytest.raises(TypeError, match="plugin"):
        with plugin_host(42):
            pass
    assert get_plugin_host() is previous


MISSPELT_PLUGIN = """from wde_core.plugin_api import hookimpl


@hookimpl
def wde_register_tokenizer(register):  # misspelt: the hook is wde_register_tokenizers
    register("kit-tok", "kit_misspelt.plugin:Nothing")
"""


class UnknownTaskPlugin:
    """Links an architecture to a task nobody registered: the registry refuses the link."""

    @hookimpl
    def wde_register_architectures(self, register):
        """A link for the unknown task 'summarize'."""
        register(ArchitectureLink(architecture="KitTypoModel", task="summarize", workflow="embed",
                                  model="wde_bert.model:BertEncoder"))


def test_plugin_host_raises_for_a_refused_plugin_it_was_given(tmp_path, monkeypatch):
    (tmp_path / "kit_misspelt").mkdir()
    (tmp_path / "kit_misspelt" / "__init__.py").write_text("")
    (tmp_path / "kit_misspelt" / "plugin.py").write_text(MISSPELT_PLUGIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    previous = get_plugin_host()
    with pytest.raises(PluginProblemError, match=r"kit-misspelt: implements unknown hook\(s\) 'wde_register_tokenizer' "
                                                 r"\(did you mean 'wde_register_tokenizers'\?\)") as raised:
        with plugin_host("kit_misspelt.plugin", use_entry_points=False):
            pytest.fail("the block must not run")
    assert [p.plugin for p in raised.value.problems] == ["kit-misspelt"]
    assert "allow_problems=True" in str(raised.value) and get_plugin_host() is previous
    with plugin_host("kit_misspelt.plugin", use_entry_points=False, allow_problems=True) as host:
        assert "kit-misspelt" not in host.plugins and [p.plugin for p in host.problems] == ["kit-misspelt"]
    with pytest.raises(PluginProblemError, match=r"kit-typo: wde_register_architectures: architecture 'KitTypoModel': "
                                                 r"unknown task 'summarize'"):
        with plugin_host(("kit-typo", UnknownTaskPlugin()), use_entry_points=False):
            pass
    with pytest.raises(PluginProblemError, match=r"kit-empty: .*hook"):
        with plugin_host(("kit-empty", object()), use_entry_points=False):
            pass
    with pytest.raises(ImportError, match=r"plugin_host: cannot import plugin module 'kit_no_such_module.plugin'"):
        with plugin_host("kit_no_such_module.plugin"):
            pass
    assert get_plugin_host() is previous


def test_plugin_host_ignores_problems_of_plugins_it_was_not_given(monkeypatch):
    monkeypatch.setenv("WDE_PLUGINS", "wde-bert,kit-not-installed")
    with plugin_host(("kit-demo", KitDemoPlugin())) as host:
        assert [p.plugin for p in host.problems] == ["kit-not-installed"]
        assert "kit-demo" in host.plugins


def test_assert_matches_hf_passes_on_a_random_bert(random_bert):
    report = assert_matches_hf(random_bert, TEXTS)
    assert set(report) == {"torch_sdpa", "eager"}
    for diffs in report.values():
        assert diffs["token_states"] < 1e-4 and diffs["pooled"] < 1e-4
        assert diffs["token_states_min_cosine"] > 1 - 1e-6 and diffs["pooled_min_cosine"] > 1 - 1e-6


def test_assert_matches_hf_in_bfloat16_takes_the_callers_tolerance(random_bert):
    with pytest.raises(ValueError, match=r"dtype='bfloat16'\): state the tolerance"):
        assert_matches_hf(random_bert, TEXTS, dtype="bfloat16")
    report = assert_matches_hf(random_bert, TEXTS, dtype=torch.bfloat16, min_cosine=0.99,
                               attention_backends=("torch_sdpa",))
    diffs = report["torch_sdpa"]
    print(f"bfloat16: {diffs}")
    assert 1e-4 < diffs["token_states"] and 0.99 <= diffs["token_states_min_cosine"] < 1 - 1e-6
    with pytest.raises(AssertionError, match=r"backend 'torch_sdpa', dtype bfloat16: token states differ from HF: "
                                             r"max abs diff \S+ \(text \d\) > atol 1e-05, min cosine 0\.9"):
        assert_matches_hf(random_bert, TEXTS, dtype="bfloat16", atol=1e-5, attention_backends=("torch_sdpa",))


def test_assert_matches_hf_fails_when_the_reference_differs(random_bert):
    reference = BertModel.from_pretrained(random_bert, attn_implementation="eager").eval()
    with torch.no_grad():
        weight = reference.encoder.layer[1].output.dense.weight
        weight.add_(0.05 * torch.randn(weight.shape, generator=torch.Generator().manual_seed(0)))
    with pytest.raises(AssertionError, match=r"backend 'eager', dtype float32: token states differ from HF: max abs "
                                             r"diff \S+ \(text \d\) > atol 0.0001, min cosine 0\.\d{6} \(text \d\)$"):
        assert_matches_hf(random_bert, TEXTS, hf_model=reference, attention_backends=("eager",))
    with pytest.raises(AssertionError, match=r"token states differ from HF: max abs diff \S+ \(text \d\), min cosine "
                                             r"0\.\d{6} \(text \d\) < min_cosine 0.999999$"):
        assert_matches_hf(random_bert, TEXTS, hf_model=reference, atol=float("inf"), min_cosine=0.999999,
                          attention_backends=("eager",))
