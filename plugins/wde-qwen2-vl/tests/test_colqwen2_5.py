"""ColQwen2.5 on wde against transformers' ``ColQwen2ForRetrieval`` on a Qwen2.5-VL backbone (its ``vlm_config`` a
``qwen2_5_vl`` one): a random small model (3 vision blocks with RMSNorm and a gated MLP, windows of 2x2 merged
patches, full attention in block 1; 2 decoder layers, GQA) saved with a ``ColQwen2Processor``; text queries and page
images of odd sizes (partial windows at their edges) in one list, every token's vector within 1e-4 (fp32) of the
reference's, MaxSim scores as ``score_retrieval``'s; the window order as transformers' ``get_vision_window_index``."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from wde_core import Engine
from wde_plugin_kit.cpu_info import CPU_BACKENDS
from wde_plugin_kit.image_builders import random_images
from wde_plugin_kit.late_interaction_checks import (QUERIES, TOL, assert_token_vectors, full_page_vectors,
                                                    interleaved, load_retriever, min_token_cosine, reference_vectors,
                                                    score_retrieval)
from wde_plugin_kit.vision_language import save_random_colqwen2_5


@pytest.fixture(scope="module")
def colqwen2_5(tmp_path_factory):
    """The saved directory, transformers' model and processor."""
    directory = save_random_colqwen2_5(tmp_path_factory.mktemp("colqwen2.5") / "colqwen2.5-tiny")
    retriever = load_retriever(directory, "ColQwen2")
    assert retriever[1].config.vlm_config.model_type == "qwen2_5_vl"
    return retriever


@pytest.fixture(scope="module")
def mixed(colqwen2_5):
    """Queries and pages of odd sizes interleaved, and transformers' vectors of each."""
    _, reference, processor = colqwen2_5
    items = interleaved(random_images(6, seed=4))
    return items, reference_vectors(reference, processor, items)


@pytest.mark.parametrize("grids", [[(1, 10, 14), (1, 4, 4), (1, 6, 2)], [(1, 2, 18), (1, 8, 8)]])
def test_window_order_follows_get_vision_window_index(grids):
    from transformers.vision_utils import get_vision_window_index

    from wde_vision_language.public import window_order

    expected, cu_expected = get_vision_window_index(torch.tensor(grids), spatial_merge_size=2, window_size=56,
                                                    patch_size=14)
    got, sizes = window_order(grids, 2, 2)
    assert torch.equal(got, expected)
    assert np.cumsum([0, *sizes]).tolist() == (cu_expected // 4).tolist()
    assert min(sizes) < 4  # partial windows at the edges


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_queries_and_pages_match_colqwen2_for_retrieval(colqwen2_5, mixed, backend):
    directory, _, processor = colqwen2_5
    items, expected = mixed
    with Engine(str(directory), device="cpu", attention_backend=backend) as engine:
        assert engine.pipeline.workflow.name == "colqwen2"
        assert type(engine.executor.worker.model.visual).__name__ == "WindowVisionTower"
        got = engine.encode(items, output="multi_vector")
    assert_token_vectors(got, expected, backend)
    from wde_vision_language.public import window_order

    pages = [item for item in items if not isinstance(item, str)]
    windows = [window_order([grid], 2, 2)[1] for grid in processor.process_images(pages)["image_grid_thw"].tolist()]
    assert max(map(len, windows)) > 2 and min(min(w) for w in windows) < 4  # several windows, partial ones


def test_bfloat16_stays_within_the_stated_tolerance(colqwen2_5, mixed):
    # measured here: min token cosine 0.99996 against fp32 transformers (eager, torch_sdpa and cpu_varlen alike)
    directory, _, _ = colqwen2_5
    items, expected = mixed
    with Engine(str(directory), device="cpu", dtype="bfloat16") as engine:
        got = engine.encode(items, output="multi_vector")
    cosine = min_token_cosine(got, expected)
    print(f"bf16 min token cosine {cosine:.6f}")
    assert cosine >= 0.9995


def test_multi_vector_scores_match_score_retrieval(colqwen2_5):
    directory, reference, processor = colqwen2_5
    pages = random_images(4, seed=5)
    queries = reference_vectors(reference, processor, QUERIES)
    docs = reference_vectors(reference, processor, pages)
    expected = score_retrieval(processor, queries, docs)
    with Engine(str(directory), device="cpu") as engine:
        scores = engine.multi_vector_scores(QUERIES, pages)
        with pytest.raises(ValueError, match=r"documents\[1\]: field 'video': video inputs are not supported"):
            engine.multi_vector_scores(QUERIES, [pages[0], {"video": b"frames"}])
    assert scores.shape == (3, 4) and np.abs(scores - expected).max() <= TOL
    assert np.ptp(expected[1]) > 1e-3


@pytest.mark.slow
def test_real_colqwen2_5_widths_match_at_full_page_resolution(tmp_path):
    # no ColQwen2.5 checkpoint can be installed from a package index here, so the real model's shapes are checked
    # with random weights: ColQwen2.5-v0.2's (Qwen2.5-VL-3B's) widths (vision 1280 wide, 16 heads of 80, MLP 3420,
    # windows of 112 px, full attention in blocks 7, 15, 23, 31; decoder 2048 wide, 16 heads of 128, 2 key/value
    # heads, MLP 11008; 128-dim vectors), one layer each (a windowed block), a page at 768 merged patches
    text = dict(hidden_size=2048, num_attention_heads=16, num_key_value_heads=2, intermediate_size=11008,
                num_hidden_layers=1, max_position_embeddings=128000,
                rope_parameters={"rope_type": "default", "mrope_section": [16, 24, 24], "rope_theta": 1000000.0})
    vision = dict(depth=1, hidden_size=1280, out_hidden_size=2048, intermediate_size=3420, num_heads=16,
                  window_size=112, fullatt_block_indexes=[7, 15, 23, 31])
    directory = save_random_colqwen2_5(tmp_path / "colqwen2.5-v0.2-shape", text=text, vision=vision,
                                       embedding_dim=128, max_pixels=768 * 28 * 28)
    got, expected = full_page_vectors(directory, "ColQwen2")
    assert got[0].shape == (expected[0].shape[0], 128) and expected[0].shape[0] > 700
    assert_token_vectors(got, expected, "real widths")
