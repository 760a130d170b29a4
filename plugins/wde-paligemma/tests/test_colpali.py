"""ColPali on wde against transformers' ``ColPaliForRetrieval``: a random small PaliGemma (2 SigLIP layers, 2 Gemma
layers with one key/value head) saved with a ``ColPaliProcessor``; text queries and page images of odd sizes and
modes in one list, every token's vector within 1e-4 (fp32) of the reference's (called with the processor's whole
output, ``token_type_ids`` included, as transformers documents it), and MaxSim scores as the processor's
``score_retrieval`` computes them."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from wde_plugin_kit.cpu_info import CPU_BACKENDS
from wde_plugin_kit.image_builders import random_images
from wde_plugin_kit.vision_language import save_random_colpali
from wde_core import Engine

QUERIES = ["what is the revenue in 2023?", "a chart of rainfall by month", "who signed the treaty"]


@pytest.fixture(scope="module")
def colpali(tmp_path_factory):
    """The saved directory, transformers' model and processor."""
    from transformers import ColPaliForRetrieval, ColPaliProcessor

    directory = save_random_colpali(tmp_path_factory.mktemp("colpali") / "colpali-tiny")
    reference = ColPaliForRetrieval.from_pretrained(directory, dtype=torch.float32, attn_implementation="eager")
    return directory, reference.eval(), ColPaliProcessor.from_pretrained(directory)


def reference_vectors(reference, processor, items) -> list[np.ndarray]:
    """transformers' embeddings of each query or page alone (no padding), ``[tokens, dim]`` each."""
    out = []
    for item in items:
        inputs = processor.process_queries([item]) if isinstance(item, str) else processor.process_images([item])
        with torch.no_grad():
            out.append(reference(**inputs).embeddings[0].numpy())
    return out


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_queries_and_pages_match_colpali_for_retrieval(colpali, backend):
    directory, reference, processor = colpali
    pages = random_images(6, seed=4)
    items = [QUERIES[0], pages[0], pages[1], QUERIES[1], pages[2], pages[3], pages[4], QUERIES[2], pages[5]]
    expected = reference_vectors(reference, processor, items)
    with Engine(str(directory), device="cpu", attention_backend=backend) as engine:
        assert engine.pipeline.workflow.name == "colpali"
        got = engine.encode(items, output="multi_vector")
    assert [g.shape for g in got] == [e.shape for e in expected]
    worst = max(np.abs(g - e).max() for g, e in zip(got, expected))
    print(f"{backend}: max abs diff {worst:.2e} over {sum(len(e) for e in expected)} token vectors")
    assert worst <= 1e-4
    assert len(expected[1]) == 49 + len(processor.tokenizer("<bos>Describe the image.\n")["input_ids"])
    assert np.abs(expected[1] - expected[2]).max() > 1e-3  # pages differ: their pixels reach the vectors


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_bfloat16_stays_within_the_stated_tolerance(colpali, backend):
    # measured here: min token cosine 0.99990-0.99992 (each CPU backend) against fp32 transformers
    directory, reference, processor = colpali
    items = QUERIES + random_images(4, seed=4)
    expected = reference_vectors(reference, processor, items)
    with Engine(str(directory), device="cpu", dtype="bfloat16", attention_backend=backend) as engine:
        got = engine.encode(items, output="multi_vector")
    cosine = min(float((g * e).sum(1).min()) for g, e in zip(got, expected))
    print(f"{backend}: bf16 min token cosine {cosine:.6f}")
    assert cosine >= 0.9995


def test_maxsim_scores_match_score_retrieval(colpali):
    directory, reference, processor = colpali
    pages = random_images(4, seed=5)
    queries, docs = reference_vectors(reference, processor, QUERIES), reference_vectors(reference, processor, pages)
    expected = processor.score_retrieval([torch.from_numpy(q) for q in queries],
                                         [torch.from_numpy(d) for d in docs]).numpy()
    with Engine(str(directory), device="cpu") as engine:
        scores = engine.multi_vector_scores(QUERIES, pages)
        one = engine.multi_vector_scores(QUERIES[1], pages)
        ranked = engine.multi_vector_rerank(QUERIES[1], pages, top_n=3)
    from wde_late_interaction.public import maxsim

    assert np.abs(maxsim(queries, docs) - expected).max() <= 1e-4
    print(f"MaxSim: max abs diff {np.abs(scores - expected).max():.2e} (scores span {np.ptp(expected):.3f})")
    assert scores.shape == (3, 4) and np.abs(scores - expected).max() <= 1e-4
    assert np.abs(one - expected[1]).max() <= 1e-4
    assert [r["index"] for r in ranked] == sorted(range(4), key=lambda i: -expected[1][i])[:3]
    assert np.ptp(expected[1]) > 1e-3  # distinct scores: the order can be wrong


def test_bad_inputs_are_refused_naming_them(colpali):
    directory, _, _ = colpali
    with Engine(str(directory), device="cpu") as engine:
        with pytest.raises(ValueError, match="output='dense'.*serves 'multi_vector' only"):
            engine.encode(QUERIES)
        with pytest.raises(TypeError, match="input 1: expected a str .query. or an image"):
            engine.encode(["fine", 3], output="multi_vector")
        with pytest.raises(ValueError, match="input 0: the query contains the placeholder token '<image>'"):
            engine.encode(["<image> sneaky"], output="multi_vector")
        with pytest.raises(ValueError, match="input 1: field 'image' is not an image file"):
            engine.encode(["ok", {"image": b"not an image"}], output="multi_vector")
        with pytest.raises(ValueError, match="ColPali lays out queries and pages .* takes no prompt"):
            engine.encode(QUERIES, output="multi_vector", prompt="query: ")
        with pytest.raises(TypeError, match=r"documents\[1\]: expected a str .query. or an image"):
            engine.multi_vector_scores(QUERIES, [random_images(1)[0], 7])
        assert len(engine.encode(QUERIES, output="multi_vector")) == 3  # it still serves


def test_paligemma_2_is_refused_by_name(tmp_path):
    from transformers import ColPaliConfig, PaliGemmaConfig

    vlm = PaliGemmaConfig(text_config={"model_type": "gemma2", "hidden_size": 64, "num_hidden_layers": 1})
    ColPaliConfig(vlm_config=vlm, architectures=["ColPaliForRetrieval"]).save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="text_config.model_type='gemma2'.*not PaliGemma 2's"):
        Engine(str(tmp_path), device="cpu")


@pytest.mark.slow
def test_real_colpali_widths_match_at_full_page_resolution(tmp_path):
    # no ColPali checkpoint can be installed from a package index here, so the real model's shapes are checked with
    # random weights: ColPali-v1.3's widths (SigLIP-So400m: 1152 wide, 16 heads, MLP 4304, 448 px in patches of 14,
    # 1,024 image tokens; Gemma-2B: 2048 wide, 8 heads of 256, 1 key/value head, MLP 16384; 128-dim vectors), one
    # layer each (the tiny tokenizer's vocabulary instead of 257k rows)
    from transformers import ColPaliForRetrieval, ColPaliProcessor

    text = dict(hidden_size=2048, intermediate_size=16384, num_hidden_layers=1, num_attention_heads=8,
                num_key_value_heads=1, head_dim=256, max_position_embeddings=8192)
    vision = dict(hidden_size=1152, intermediate_size=4304, num_hidden_layers=1, num_attention_heads=16,
                  patch_size=14, image_size=448)
    directory = save_random_colpali(tmp_path / "colpali-v1.3-shape", text=text, vision=vision, embedding_dim=128)
    reference = ColPaliForRetrieval.from_pretrained(directory, dtype=torch.float32, attn_implementation="sdpa").eval()
    processor = ColPaliProcessor.from_pretrained(directory)
    from PIL import Image

    page = Image.fromarray(np.random.default_rng(0).integers(0, 256, (1100, 850, 3), dtype=np.uint8))
    expected = reference_vectors(reference, processor, [page, QUERIES[0]])
    with Engine(str(directory), device="cpu") as engine:
        got = engine.encode([page, QUERIES[0]], output="multi_vector")
    assert got[0].shape == (expected[0].shape[0], 128) and expected[0].shape[0] > 1024
    worst = max(np.abs(g - e).max() for g, e in zip(got, expected))
    print(f"ColPali-v1.3 widths: max abs diff {worst:.2e}")
    assert worst <= 1e-4
