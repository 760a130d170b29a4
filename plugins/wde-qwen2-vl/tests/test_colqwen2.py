"""ColQwen2 on wde against transformers' ``ColQwen2ForRetrieval``: a random small model (2 vision blocks, 2 decoder
layers, GQA) saved with a ``ColQwen2Processor``; text queries and page images of odd sizes and modes in one list,
every token's vector within 1e-4 (fp32) of the reference's, and MaxSim scores as the processor's
``score_retrieval`` computes them."""

from __future__ import annotations

import numpy as np
import pytest

from wde_core import Engine
from wde_plugin_kit.cpu_info import CPU_BACKENDS
from wde_plugin_kit.image_builders import random_images
from wde_plugin_kit.late_interaction_checks import (QUERIES, TOL, assert_scores_and_ranking, assert_token_vectors,
                                                    full_page_vectors, interleaved, load_retriever, min_token_cosine,
                                                    reference_vectors, score_retrieval)
from wde_plugin_kit.vision_language import save_random_colqwen2


@pytest.fixture(scope="module")
def colqwen2(tmp_path_factory):
    """The saved directory, transformers' model and processor."""
    return load_retriever(save_random_colqwen2(tmp_path_factory.mktemp("colqwen2") / "colqwen2-tiny"), "ColQwen2")


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_queries_and_pages_match_colqwen2_for_retrieval(colqwen2, backend):
    directory, reference, processor = colqwen2
    items = interleaved(random_images(6, seed=4))
    expected = reference_vectors(reference, processor, items)
    with Engine(str(directory), device="cpu", attention_backend=backend) as engine:
        assert engine.pipeline.workflow.name == "colqwen2"
        got = engine.encode(items, output="multi_vector")
    assert_token_vectors(got, expected, backend)
    assert min(len(e) for e in expected[1:3]) > 5  # pages of several merged patches each


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_bfloat16_stays_within_the_stated_tolerance(colqwen2, backend):
    # measured here: min token cosine 0.99996 (torch_sdpa and cpu_varlen), max abs 0.006
    directory, reference, processor = colqwen2
    items = QUERIES + random_images(6, seed=4)
    expected = reference_vectors(reference, processor, items)
    with Engine(str(directory), device="cpu", dtype="bfloat16", attention_backend=backend) as engine:
        got = engine.encode(items, output="multi_vector")
    assert min_token_cosine(got, expected) >= 0.9995


def test_maxsim_scores_match_score_retrieval(colqwen2):
    directory, reference, processor = colqwen2
    pages = random_images(3, seed=9)
    with Engine(str(directory), device="cpu") as engine:
        queries, docs = engine.encode(QUERIES, output="multi_vector"), engine.encode(pages, output="multi_vector")
    from wde_late_interaction.public import maxsim

    expected = score_retrieval(processor, queries, docs)
    got = maxsim(queries, docs)
    assert got.shape == (3, 3) and np.abs(got - expected).max() <= TOL


def test_multi_vector_scores_and_rerank(colqwen2):
    directory, reference, processor = colqwen2
    pages = random_images(4, seed=5)
    queries = reference_vectors(reference, processor, QUERIES)
    docs = reference_vectors(reference, processor, pages)
    expected = score_retrieval(processor, queries, docs)
    with Engine(str(directory), device="cpu") as engine:
        scores = engine.multi_vector_scores(QUERIES, pages)
        one = engine.multi_vector_scores(QUERIES[1], pages)
        ranked = engine.multi_vector_rerank(QUERIES[1], pages, top_n=3)
        with pytest.raises(TypeError, match=r"documents\[2\]: expected a str .query. or an image"):
            engine.multi_vector_scores(QUERIES, [pages[0], pages[1], 7])
        with pytest.raises(TypeError, match=r"queries\[1\]: expected a str"):
            engine.multi_vector_scores(["fine", pages[0]], pages)
    assert_scores_and_ranking(scores, one, ranked, expected)


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
    text = dict(hidden_size=1536, num_attention_heads=12, num_key_value_heads=2, intermediate_size=8960,
                num_hidden_layers=1, max_position_embeddings=32768,
                rope_parameters={"rope_type": "default", "mrope_section": [16, 24, 24], "rope_theta": 1000000.0})
    vision = dict(depth=1, embed_dim=1280, hidden_size=1536, num_heads=16, mlp_ratio=4)
    directory = save_random_colqwen2(tmp_path / "colqwen2-v1.0-shape", text=text, vision=vision, embedding_dim=128,
                                     max_pixels=768 * 28 * 28)
    got, expected = full_page_vectors(directory, "ColQwen2")
    assert got[0].shape == (expected[0].shape[0], 128) and expected[0].shape[0] > 700
    assert_token_vectors(got, expected, "ColQwen2-v1.0 widths")
