"""wde-splade against sentence-transformers' ``SparseEncoder`` on tiny random models it saved: the same non-zero
token ids and weights within 1e-4 (max and sum pooling, relu and log1p_relu, max_active_dims, the inference-free
Router's query and document routes), the dense vocabulary-sized vector, routing by prompt_name, bad input."""

from __future__ import annotations

import numpy as np
import pytest

from splade_models import mlm_dir, splade_dir, router_dir, save_router, save_splade  # noqa: F401 (fixtures)
from wde_core import Engine

TOL = 1e-4
TEXTS = ["hello world", "The quick brown fox jumps over the lazy dog. " * 3, "a", "Odd lengths: 1 22 333 !?",
         "word " * 100]


def reference(directory, kind, texts=TEXTS, **kwargs):
    """``SparseEncoder.encode_query`` / ``encode_document`` as dense float32 ``[n, vocab]``."""
    from sentence_transformers import SparseEncoder

    model = SparseEncoder(str(directory), device="cpu")
    return getattr(model, f"encode_{kind}")(texts, convert_to_tensor=True, **kwargs).to_dense().numpy()


def assert_sparse_matches(ours: list[dict], ref: np.ndarray) -> None:
    """Same non-zero ids per text, weights within TOL."""
    assert len(ours) == len(ref)
    for got, want in zip(ours, ref):
        ids = np.flatnonzero(want)
        assert sorted(got) == ids.tolist()
        assert np.abs(np.array([got[i] for i in ids]) - want[ids]).max(initial=0) <= TOL
        assert all(isinstance(i, int) and isinstance(w, float) for i, w in got.items())


@pytest.mark.parametrize("pooling,activation", [("max", "relu"), ("sum", "relu"), ("max", "log1p_relu"),
                                                ("sum", "log1p_relu")])
def test_splade_matches_sparse_encoder(tmp_path, mlm_dir, pooling, activation):
    directory = save_splade(tmp_path / f"{pooling}-{activation}", mlm_dir, pooling, activation)
    ref = reference(directory, "document")
    engine = Engine(str(directory), device="cpu", max_num_batched_tokens=256)  # several batches
    assert engine.pipeline.link.variant == "splade"
    assert f"{pooling} pooling of {activation}" in engine.pipeline.reasons["workflow"]
    assert (ref > 0).sum(axis=1).min() > 0
    assert_sparse_matches(engine.encode(TEXTS, output="sparse"), ref)
    dense = engine.encode(TEXTS)  # the vocabulary-sized vector, as SparseEncoder.encode(convert_to_tensor=True)
    assert dense.shape == ref.shape and dense.dtype == np.float32
    assert np.abs(dense - ref).max() <= TOL
    both = engine.encode(TEXTS[0], output=("sparse", "dense"))
    assert both["sparse"] == engine.encode(TEXTS[0], output="sparse")
    np.testing.assert_allclose(both["dense"], dense[0], atol=1e-6)


def test_max_active_dims_from_the_directory_and_the_engine_argument(tmp_path, mlm_dir, splade_dir):
    saved = save_splade(tmp_path / "top5", mlm_dir, max_active_dims=5)
    ref = reference(saved, "document")
    assert (np.count_nonzero(ref, axis=1) == 5).all()
    engine = Engine(str(saved), device="cpu")
    assert engine.pipeline.reasons["max_active_dims"] == "config_sentence_transformers.json max_active_dims"
    assert_sparse_matches(engine.encode(TEXTS, output="sparse"), ref)
    assert np.abs(engine.encode(TEXTS) - ref).max() <= TOL
    ref3 = reference(splade_dir, "query", max_active_dims=3)
    engine = Engine(str(splade_dir), device="cpu", max_active_dims=3)
    assert engine.pipeline.reasons["max_active_dims"] == "engine argument max_active_dims"
    assert_sparse_matches(engine.encode(TEXTS, output="sparse", prompt_name="query"), ref3)


def test_inference_free_router_routes_query_and_document(router_dir):
    engine = Engine(str(router_dir), device="cpu")
    assert "Router (document: MLM + SpladePooling; query: SparseStaticEmbedding)" in \
        engine.pipeline.reasons["workflow"]
    queries, documents = reference(router_dir, "query"), reference(router_dir, "document")
    assert_sparse_matches(engine.encode(TEXTS, output="sparse", prompt_name="query"), queries)
    assert_sparse_matches(engine.encode(TEXTS, output="sparse", prompt_name="document"), documents)
    assert_sparse_matches(engine.encode(TEXTS, output="sparse"), documents)  # the Router's default route
    assert np.abs(engine.encode(TEXTS, prompt_name="query") - queries).max() <= TOL
    assert not np.allclose(queries, documents)
    # the query route runs no transformer: its weights are the IDF weights of the tokens present
    idf = engine.encode("hello hello world", output="sparse", prompt_name="query")
    assert idf == engine.encode("world hello", output="sparse", prompt_name="query")


def test_router_mixed_batches_on_the_async_engine(router_dir):
    import asyncio

    from wde_core.plugin_api import AsyncEngine

    async def both():  # submitted together: the scheduler packs query and document requests into one batch
        engine = AsyncEngine(str(router_dir), device="cpu")
        try:
            return await asyncio.gather(engine.encode(TEXTS, output="sparse", prompt_name="query"),
                                        engine.encode(TEXTS, output="sparse", prompt_name="document"))
        finally:
            await engine.close()

    queries, documents = asyncio.run(both())
    assert_sparse_matches(queries, reference(router_dir, "query"))
    assert_sparse_matches(documents, reference(router_dir, "document"))


def test_sum_pooled_router(tmp_path, mlm_dir):
    directory = save_router(tmp_path / "sum-relu", mlm_dir, "sum", "relu")
    engine = Engine(str(directory), device="cpu")
    assert_sparse_matches(engine.encode(TEXTS, output="sparse", prompt_name="document"),
                          reference(directory, "document"))


def test_bad_input_is_refused_before_any_work(splade_dir, router_dir):
    engine = Engine(str(splade_dir), device="cpu")
    with pytest.raises(ValueError, match="dimensions=4: a sparse encoder's vectors span the vocabulary"):
        engine.encode(TEXTS, dimensions=4)
    with pytest.raises(ValueError, match="output='colbert'"):
        engine.encode(TEXTS, output="colbert")
    with pytest.raises(ValueError, match="engine argument max_active_dims=0: expected a positive integer"):
        Engine(str(splade_dir), device="cpu", max_active_dims=0)
    router = Engine(str(router_dir), device="cpu")
    with pytest.raises(ValueError, match="input 1: field 'text' has no tokens for the 'query' route"):
        router.encode(["ok", ""], output="sparse", prompt_name="query")


def test_plain_mlm_stays_an_encoder_and_unknown_sparse_modules_are_refused(mlm_dir, tmp_path):
    assert Engine(str(mlm_dir), device="cpu").pipeline.link.variant == ""
    directory = save_splade(tmp_path / "csr", mlm_dir)
    modules = (directory / "modules.json").read_text().replace("SpladePooling\"", "SparseAutoEncoder\"")
    (directory / "modules.json").write_text(modules)
    with pytest.raises(ValueError, match="unsupported sentence-transformers modules: .*SparseAutoEncoder"):
        Engine(str(directory), device="cpu")


@pytest.mark.parametrize("truncate", ["chunk", "late"])
def test_chunked_and_late_chunked_inputs_are_refused_before_any_work(splade_dir, truncate):
    """Both average dense vectors (of chunks, of token states): a SPLADE model's outputs are its own."""
    engine = Engine(str(splade_dir), device="cpu")
    ran = []
    engine.batch_listeners.append(ran.append)
    with pytest.raises(ValueError, match=f"truncate='{truncate}' averages dense vectors: .* outputs sparse"):
        engine.encode(["a text " * 200], truncate=truncate)
    assert ran == []
