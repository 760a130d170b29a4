"""ColPali on wde against transformers' ``ColPaliForRetrieval``: a random small PaliGemma (2 SigLIP layers, 2 Gemma
layers with one key/value head) saved with a ``ColPaliProcessor``; text queries and page images of odd sizes and
modes in one list, every token's vector within 1e-4 (fp32) of the reference's (called with the processor's whole
output, ``token_type_ids`` included, as transformers documents it), and MaxSim scores as the processor's
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
from wde_plugin_kit.vision_language import save_random_colpali


@pytest.fixture(scope="module")
def colpali(tmp_path_factory):
    """The saved directory, transformers' model and processor."""
    return load_retriever(save_random_colpali(tmp_path_factory.mktemp("colpali") / "colpali-tiny"), "ColPali")


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_queries_and_pages_match_colpali_for_retrieval(colpali, backend):
    directory, reference, processor = colpali
    items = interleaved(random_images(6, seed=4))
    expected = reference_vectors(reference, processor, items)
    with Engine(str(directory), device="cpu", attention_backend=backend) as engine:
        assert engine.pipeline.workflow.name == "colpali"
        got = engine.encode(items, output="multi_vector")
    assert_token_vectors(got, expected, backend)
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
    cosine = min_token_cosine(got, expected)
    print(f"{backend}: bf16 min token cosine {cosine:.6f}")
    assert cosine >= 0.9995


def test_maxsim_scores_match_score_retrieval(colpali):
    directory, reference, processor = colpali
    pages = random_images(4, seed=5)
    queries, docs = reference_vectors(reference, processor, QUERIES), reference_vectors(reference, processor, pages)
    expected = score_retrieval(processor, queries, docs)
    with Engine(str(directory), device="cpu") as engine:
        scores = engine.multi_vector_scores(QUERIES, pages)
        one = engine.multi_vector_scores(QUERIES[1], pages)
        ranked = engine.multi_vector_rerank(QUERIES[1], pages, top_n=3)
    from wde_late_interaction.public import maxsim

    assert np.abs(maxsim(queries, docs) - expected).max() <= TOL
    assert_scores_and_ranking(scores, one, ranked, expected)


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
    text = dict(hidden_size=2048, intermediate_size=16384, num_hidden_layers=1, num_attention_heads=8,
                num_key_value_heads=1, head_dim=256, max_position_embeddings=8192)
    vision = dict(hidden_size=1152, intermediate_size=4304, num_hidden_layers=1, num_attention_heads=16,
                  patch_size=14, image_size=448)
    directory = save_random_colpali(tmp_path / "colpali-v1.3-shape", text=text, vision=vision, embedding_dim=128)
    got, expected = full_page_vectors(directory, "ColPali")
    assert got[0].shape == (expected[0].shape[0], 128) and expected[0].shape[0] > 1024
    assert_token_vectors(got, expected, "ColPali-v1.3 widths")
