"""quantization="int8" on whole models: the real all-MiniLM-L6-v2 against float32 (min cosine), a cross-encoder's
ranking (Spearman against float32), the e5 XLM-R and decoder embedders, which layers take which path, the refusals, and
what `wde inspect` and `wde encode` say and do."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy.stats import spearmanr

from wde_plugin_kit.corpus import cosines, wiki_paragraphs
from wde_plugin_kit.encoders import save_random_bert
from wde_core import Engine
from wde_core.plugin_api import Linear
from wde_cpu_kernels import int8

from kernel_builds import int8_past_float_rows, needs_kernel  # noqa: F401 - an autouse fixture


def test_down_projections_take_one_scale_per_token(tiny_bert_dir):
    engine = Engine(str(tiny_bert_dir), quantization="int8")
    report = engine.executor.worker.model.quantization_report
    assert report["int8 per token"] and all(name.endswith("ffn_out") for name in report["int8 per token"])
    assert {name.rsplit(".", 1)[1] for name in report["int8"]} == {"qkv", "attn_out", "ffn_in"}
    assert report["compiled LayerNorm"] == []  # float32 keeps torch's LayerNorm (the compiled one is no faster there)
    engine.close()


@needs_kernel
def test_bfloat16_layer_norms_run_compiled(tiny_bert_dir):
    engine = Engine(str(tiny_bert_dir), quantization="int8", dtype="bfloat16")
    model = engine.executor.worker.model
    names = model.quantization_report["compiled LayerNorm"]
    assert {name.rsplit(".", 1)[1] for name in names} == {"LayerNorm", "attn_norm", "ffn_norm"}
    assert all(module.kernel is not None for name, module in model.named_modules() if name in names)
    engine.close()


@pytest.fixture(scope="module")
def minilm_float32_300(minilm_dir):
    """300 wiki paragraphs and the real all-MiniLM-L6-v2's float32 embeddings of them: one reference for both dtypes."""
    texts = wiki_paragraphs(300)
    return texts, Engine(str(minilm_dir)).encode(texts)


@needs_kernel
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_real_minilm_int8_stays_within_cosine_099_of_float32(minilm_dir, minilm_float32_300, dtype):
    texts, reference = minilm_float32_300
    quantized = Engine(str(minilm_dir), quantization="int8", dtype=dtype).encode(texts)
    assert cosines(reference, quantized).min() >= 0.99


@needs_kernel
def test_a_cross_encoder_ranks_as_in_float32(minilm_dir, tmp_path):
    """all-MiniLM-L6-v2's real encoder under a seeded classification head, as a cross-encoder; its pooler and
    classifier, outside the transformer blocks, stay in float32 (in int8 the Spearman measured 0.990, kept 0.994)."""
    from transformers import AutoTokenizer, BertForSequenceClassification

    torch.manual_seed(0)
    model = BertForSequenceClassification.from_pretrained(str(minilm_dir), num_labels=1)
    model.save_pretrained(tmp_path)
    AutoTokenizer.from_pretrained(str(minilm_dir)).save_pretrained(tmp_path)
    paragraphs = wiki_paragraphs(220)
    queries, documents = [p[:80] for p in paragraphs[:3]], paragraphs[100:220]

    def scores(engine: Engine) -> list[float]:
        ranked = [engine.rerank(query, documents, return_documents=False) for query in queries]
        return [r["score"] for results in ranked for r in sorted(results, key=lambda r: r["index"])]

    quantized = Engine(str(tmp_path), quantization="int8")
    assert quantized.executor.worker.model.quantization_report["kept"] == ["pooler.dense", "classifier"]
    assert spearmanr(scores(Engine(str(tmp_path))), scores(quantized)).statistic >= 0.99


def test_refusals_name_the_argument(tmp_path, tiny_bert_dir):
    with pytest.raises(ValueError, match=r"quantization='int4': expected one of int8"):
        Engine(str(tiny_bert_dir), quantization="int4")
    with pytest.raises(ValueError, match="has no wde_core Linear layer in a transformer block to quantize"):
        int8.quantize_model(torch.nn.Sequential(torch.nn.Linear(4, 4)))
    with pytest.raises(ValueError, match="has no wde_core Linear layer in a transformer block to quantize"):
        int8.quantize_model(torch.nn.Sequential(Linear(4, 4)))  # a head alone (numbered itself, not inside a block)


def test_inspect_says_how_each_layer_is_quantized(tiny_bert_dir):
    done = subprocess.run([str(Path(sys.executable).with_name("wde")), "inspect", str(tiny_bert_dir), "--json",
                           "--engine-arg", "quantization=int8", "--dtype", "bfloat16"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["quantization"] == "int8"
    assert "down projections (more inputs than outputs, the FFN's) with activations per token" in \
        report["reasons"]["quantization"]
    assert "attention, norms, pooling and the heads outside the blocks (pooler, classifier, projections) in bfloat16" \
        in report["reasons"]["quantization"]


def test_int8_is_close_on_a_random_bert_too(tmp_path):
    directory = save_random_bert(tmp_path / "bert", num_hidden_layers=3, hidden_size=64, intermediate_size=128)
    texts = ["a short one", "a somewhat longer sentence about nothing much at all", "x " * 40]
    full, quick = Engine(str(directory)).encode(texts), Engine(str(directory), quantization="int8").encode(texts)
    assert np.all(cosines(full, quick) > 0.99)


@needs_kernel
def test_real_e5_xlmr_int8_stays_within_cosine_099(e5_dirs):
    """multilingual-e5-small's real (dequantized 4-bit) weights as XLM-R, on the wiki paragraphs."""
    texts = [f"passage: {text}" for text in wiki_paragraphs(200)]
    reference = Engine(str(e5_dirs["xlmr"])).encode(texts)
    quantized = Engine(str(e5_dirs["xlmr"]), quantization="int8").encode(texts)
    assert cosines(reference, quantized).min() >= 0.99


@needs_kernel
@pytest.mark.parametrize("family", ["qwen2", "llama"])
def test_a_decoder_embedder_stays_within_cosine_099(tmp_path, family):
    """A random-weight decoder (GQA, SwiGLU, RMSNorm, last-token pooling): its gate/up and attention projections
    in int8 at one scale per batch, the down projections at one scale per token."""
    from wde_plugin_kit.decoders import save_random_decoder

    directory = save_random_decoder(tmp_path / family, family)
    texts = wiki_paragraphs(40)
    reference = Engine(str(directory)).encode(texts)
    engine = Engine(str(directory), quantization="int8")
    report = engine.executor.worker.model.quantization_report
    assert report["int8"] and report["int8 per token"]
    assert not [name for name in report["int8"] if name.endswith("down_proj")], report  # all per token
    assert cosines(reference, engine.encode(texts)).min() >= 0.99


def test_the_command_line_takes_it_as_an_engine_argument(tiny_bert_dir, tmp_path):
    wde = str(Path(sys.executable).with_name("wde"))
    out = tmp_path / "v.npy"
    done = subprocess.run([wde, "encode", "--model", str(tiny_bert_dir), "--engine-arg", "quantization=int8",
                           "--output", str(out), "a text", "another text"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    quantized = np.load(out)
    assert cosines(Engine(str(tiny_bert_dir)).encode(["a text", "another text"]), quantized).min() > 0.99


@needs_kernel
@pytest.mark.slow
def test_real_minilm_int8_on_the_2000_wiki_paragraphs(minilm_dir, minilm_corpus):
    """The issue's accuracy bar on the whole benchmark corpus: min cosine >= 0.99 against float32 (the session's
    sentence-transformers reference, which wde fp32 matches within cosine 0.99999), int8 with bf16 around it (the
    fastest setting; sentence-transformers' ONNX and OpenVINO int8 give 0.973 and 0.981)."""
    texts, reference = minilm_corpus
    quantized = Engine(str(minilm_dir), quantization="int8", dtype="bfloat16", num_threads=2).encode(texts)
    assert cosines(reference, quantized).min() >= 0.99
