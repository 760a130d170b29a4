"""Tiny random SPLADE directories saved by sentence-transformers' ``SparseEncoder`` (no hub), and their fixtures,
imported by each test module by name (pytest puts this tests folder on ``sys.path``). ``save_mlm`` and
``save_splade`` live in wde_plugin_kit.encoders: wde-ray's tests use them too."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoTokenizer

from wde_plugin_kit.encoders import save_mlm, save_splade


def save_router(directory, mlm, pooling="max", activation="log1p_relu"):
    """An inference-free model: query route ``SparseStaticEmbedding`` with random IDF weights (zero for a few
    tokens), document route MLM + ``SpladePooling``, as OpenSearch's doc-v3 models."""
    from sentence_transformers import SparseEncoder
    from sentence_transformers.base.modules import Router
    from sentence_transformers.sparse_encoder.modules import MLMTransformer, SparseStaticEmbedding, SpladePooling

    tokenizer = AutoTokenizer.from_pretrained(str(mlm))
    torch.manual_seed(7)
    idf = torch.rand(len(tokenizer.get_vocab())) * 5
    idf[::7] = 0
    router = Router.for_query_document([SparseStaticEmbedding(tokenizer, weight=idf, frozen=True)],
                                       [MLMTransformer(str(mlm)), SpladePooling(pooling, activation)])
    SparseEncoder(modules=[router], similarity_fn_name="dot").save(str(directory))
    return directory


@pytest.fixture(scope="session")
def mlm_dir(tmp_path_factory):
    """The random MLM the SPLADE directories wrap."""
    return save_mlm(tmp_path_factory.mktemp("mlm") / "bert")


@pytest.fixture(scope="session")
def splade_dir(tmp_path_factory, mlm_dir):
    """Max pooling of relu (naver/splade-v3's configuration)."""
    return save_splade(tmp_path_factory.mktemp("splade") / "max-relu", mlm_dir)


@pytest.fixture(scope="session")
def router_dir(tmp_path_factory, mlm_dir):
    """An inference-free Router model."""
    return save_router(tmp_path_factory.mktemp("router") / "inference-free", mlm_dir)
