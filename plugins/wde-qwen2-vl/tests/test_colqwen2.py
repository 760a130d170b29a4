"""ColQwen2 on wde against transformers' ``ColQwen2ForRetrieval``: a random small model (2 vision blocks, 2 decoder
layers, GQA) saved with a ``ColQwen2Processor``; text queries and page images of odd sizes and modes in one list,
every token's vector within 1e-4 (fp32) of the reference's, and MaxSim scores as the processor's
``score_retrieval`` computes them."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from wde_plugin_kit.cpu_info import CPU_BACKENDS
from wde_plugin_kit.image_builders import random_images
from wde_plugin_kit.vision_language import save_random_colqwen2
from wde_core import Engine

QUERIES = ["what is the revenue in 2023?", "a chart of rainfall by month", "who signed the treaty"]


@pytest.fixture(scope="module")
def colqwen2(tmp_path_factory):
    """The saved directory, transformers' model and processor."""
    from transformers import ColQwen2ForRetrieval, ColQwen2Processor

    directory = save_random_colqwen2(tmp_path_factory.mktemp("colqwen2") / "colqwen2-tiny")
    reference = ColQwen2ForRetrieval.from_pretrained(directory, dtype=torch.float32, attn_implementation="eager")
    return directory, reference.eval(), ColQwen2Processor.from_pretrained(directory)


def reference_vectors(reference, processor, items) -> list[np.ndarray]:
    """transformers' embeddings of each query or page alone (no padding), ``[tokens, dim]`` each."""
    out = []
    for item in items:
        inputs = processor.process_queries([item]) if isinstance(item, str) else processor.process_images([item])
        with torch.no_grad():
            out.append(reference(**inputs).embeddings[0].numpy())
    return out


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_queries_and_pages_match_colqwen2_for_retrieval(colqwen2, backend):
    directory, reference, processor = colqwen2
    pages = random_images(6, seed=4)
    items = [QUERIES[0], pages[0], pages[1], QUERIES[1], pages[2], pages[3], pages[4], QUERIES[2], pages[5]]
    expected = reference_vectors(reference, processor, items)
    with Engine(str(directory), device="cpu", attention_backend=backend) as engine:
        assert engine.pipeline.workflow.name == "colqwen2"
        got = engine.encode(items, output="multi_vector")
    assert [g.shape for g in got] == [e.shape for e in expected]
    worst = max(np.abs(g - e).max() for g, e in zip(got, expected))
    print(f"{backend}: max abs diff {worst:.2e} over {sum(len(e) for e in expected)} token vectors")
    assert worst <= 1e-4
    assert min(len(e) for e in expected[1:3]) > 5  # pages of several merged patches each


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_bfloat16_stays_within_the_stated_tolerance(colqwen2, backend):
    # measured here: min token cosine 0.99996 (torch_sdpa and cpu_varlen), max abs 0.006
    directory, reference, processor = colqwen2
    items = QUERIES + random_images(6, seed=4)
    expected = reference_vectors(reference, processor, items)
    with Engine(str(directory), device="cpu", dtype="bfloat16", attention_backend=backend) as engine:
        got = engine.encode(items, output="multi_vector")
    assert min(float((g * e).sum(1).min()) for g, e in zip(got, expected)) >= 0.9995


def test_maxsim_scores_match_score_retrieval(colqwen2):
    directory, reference, processor = colqwen2
    pages = random_images(3, seed=9)
    with Engine(str(directory), device="cpu") as engine:
        queries, docs = engine.encode(QUERIES, output="multi_vector"), engine.encode(pages, output="multi_vector")
    from wde_late_interaction.public import maxsim

    expected = processor.score_retrieval([torch.from_numpy(q) for q in queries], [torch.from_numpy(d) for d in docs])
    got = maxsim(queries, docs)
    assert got.shape == (3, 3) and np.abs(got - expected.numpy()).max() <= 1e-4


def test_multi_vector_scores_and_rerank(colqwen2):
    directory, reference, processor = colqwen2
    pages = random_images(4, seed=5)
    queries = reference_vectors(reference, processor, QUERIES)
    docs = reference_vectors(reference, processor, pages)
    expected = processor.score_retrieval([torch.from_numpy(q) for q in queries],
                                         [torch.from_numpy(d) for d in docs]).numpy()
    with Engine(str(directory), device="cpu") as engine:
        scores = engine.multi_vector_scores(QUERIES, pages)
        one = engine.multi_vector_scores(QUERIES[1], pages)
        ranked = engine.multi_vector_rerank(QUERIES[1], pages, top_n=3)
        with pytest.raises(TypeError, match=r"documents\[2\]: expected a str .query. or an image"):
            engine.multi_vector_scores(QUERIES, [pages[0], pages[1], 7])
        with pytest.raises(TypeError, match=r"queries\[1\]: expected a str"):
            engine.multi_vector_scores(["fine", pages[0]], pages)
    assert scores.shape == (3, 4) and np.abs(scores - expected).max() <= 1e-4
    assert np.abs(one - expected[1]).max() <= 1e-4
    order = sorted(range(4), key=lambda i: -expected[1][i])[:3]
    assert [r["index"] for r in ranked] == order
    assert np.ptp(expected[1]) > 1e-3  # distinct scores: the order can be wrong


def test_bad_inputs_are_refused_naming_them(colqwen2):
    directory, _, _ = colqwen2
    with Engine(str(directory), device="cpu") as engine:
        with pytest.raises(ValueError, match="output='dense'.*serves 'multi_vector' only"):
            engine.encode(QUERIES)
        with pytest.raises(TypeError, match="input 1: expected a str .query. or an image"):
            engine.encode(["fine", 3], output="multi_vector")
        with pytest.raises(ValueError, match="input 0: the query contains the placeholder token"):
            engine.encode(["<|image_pad|> sneaky"], output="multi_vector")
        with pytest.raises(ValueError, match="input 1: "):
            engine.encode(["ok", {"image": b"not an image"}], output="multi_vector")
        with pytest.raises(ValueError, match="takes no prompt"):
            engine.encode(QUERIES, output="multi_vector", prompt="query: ")
        assert len(engine.encode(QUERIES, output="multi_vector")) == 3  # it still serves


@pytest.mark.slow
def test_real_colqwen2_widths_match_at_full_page_resolution(tmp_path):
    # no ColQwen2 checkpoint can be installed from a package index here, so the real model's shapes are checked with
    # random weights: ColQwen2-v1.0's widths (vision 1280 wide, 16 heads of 80; decoder 1536 wide, 12 heads of 128,
    # 2 key/value heads, MLP 8960; 128-dim vectors), one layer each, a page at its 768 merged patches (3,072 patches)
    from transformers import ColQwen2ForRetrieval, ColQwen2Processor

    text = dict(hidden_size=1536, num_attention_heads=12, num_key_value_heads=2, intermediate_size=8960,
                num_hidden_layers=1, max_position_embeddings=32768,
                rope_parameters={"rope_type": "default", "mrope_section": [16, 24, 24], "rope_theta": 1000000.0})
    vision = dict(depth=1, embed_dim=1280, hidden_size=1536, num_heads=16, mlp_ratio=4)
    directory = save_random_colqwen2(tmp_path / "colqwen2-v1.0-shape", text=text, vision=vision, embedding_dim=128,
                                     max_pixels=768 * 28 * 28)
    reference = ColQwen2ForRetrieval.from_pretrained(directory, dtype=torch.float32, attn_implementation="sdpa").eval()
    processor = ColQwen2Processor.from_pretrained(directory)
    from PIL import Image

    page = Image.fromarray(np.random.default_rng(0).integers(0, 256, (1100, 850, 3), dtype=np.uint8))
    expected = reference_vectors(reference, processor, [page, QUERIES[0]])
    with Engine(str(directory), device="cpu") as engine:
        got = engine.encode([page, QUERIES[0]], output="multi_vector")
    assert got[0].shape == (expected[0].shape[0], 128) and expected[0].shape[0] > 700
    assert max(np.abs(g - e).max() for g, e in zip(got, expected)) <= 1e-4
