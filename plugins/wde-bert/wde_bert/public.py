"""wde-bert's public API for other plugins: the BERT encoder, its post-norm layer and its embeddings."""

from wde_bert.model import BertEmbeddings, BertEncoder, BertLayer

__all__ = ["BertEmbeddings", "BertEncoder", "BertLayer"]
