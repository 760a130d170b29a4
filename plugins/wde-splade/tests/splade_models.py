"""Tiny random SPLADE directories saved by sentence-transformers' ``SparseEncoder`` (no hub), and their fixtures,
imported by each test module (a ``conftest.py`` here would shadow the repository's root ``conftest`` module that
other plugins' tests import from)."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoTokenizer, BertConfig, BertForMaskedLM

from wde_plugin_kit import save_random_model

TINY = dict(vocab_size=1, hidden_size=32, num_attention_heads=2, num_hidden_layers=2, intermediate_size=64,
            max_position_embeddings=64)  # vocab_size: the tokenizer's (save_random_model keeps the larger)


def save_mlm(directory, seed=1):
    """A random ``BertForMaskedLM`` with a tiny WordPiece tokenizer; its vocabulary is the tokenizer's."""
    config = BertConfig(**TINY)
    config.architectures = ["BertForMaskedLM"]
    return save_random_model(directory, config, model_class=BertForMaskedLM, seed=seed)


def save_splade(directory, mlm, pooling="max", activation="relu", max_active_dims=None):
    """``SparseEncoder([MLMTransformer, SpladePooling])`` saved to ``directory``."""
    from sentence_transformers import SparseEncoder
    from sentence_transformers.sparse_encoder.modules import MLMTransformer, SpladePooling

    model = SparseEncoder(modules=[MLMTransformer(str(mlm)), SpladePooling(pooling, activation)],
                          max_active_dims=max_active_dims)
    model.save(str(directory))
    return directory


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
