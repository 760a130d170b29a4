"""The text tower of CLIP's and SigLIP's dual encoders over packed texts: token and absolute position embeddings,
wde-images' pre-norm ``Encoder`` (CLIP: causal, pooled at EOS; SigLIP: pooled at the last position, then a linear
head)."""

from __future__ import annotations

import torch
from torch import nn

from wde_core.plugin_api import Linear
from wde_images.public import Encoder


class TextEmbeddings(nn.Module):
    """Token + absolute position embeddings."""

    def __init__(self, config) -> None:
        super().__init__()
        self.token_embedding = nn.Embedding(config.vocab_size, config.hidden_size)
        self.position_embedding = nn.Embedding(config.max_position_embeddings, config.hidden_size)


class TextTower(nn.Module):
    """The text transformer: one pooled vector per text (CLIP at its EOS token, SigLIP at its last position,
    through ``head``)."""

    def __init__(self, config, attention, *, siglip: bool) -> None:
        super().__init__()
        self.embeddings = TextEmbeddings(config)
        self.encoder = Encoder(config, attention)
        self.final_layer_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.head = Linear(config.hidden_size, getattr(config, "projection_size", None) or config.hidden_size) \
            if siglip else None

    def forward(self, batch) -> torch.Tensor:
        """``[texts, H]``: each packed text's vector at its pooled token (``batch.pool_index``)."""
        e = self.embeddings
        x = e.token_embedding(batch.input_ids) + e.position_embedding(batch.positions)
        pooled = self.final_layer_norm(self.encoder(x, batch.attn_metadata)).index_select(0, batch.pool_index)
        return self.head(pooled) if self.head is not None else pooled


def pooled_token(token_ids: list[int], eos_token_id: int | None, siglip: bool) -> int:
    """The position pooled in a text: SigLIP's last; CLIP's first EOS (the highest id when the config's
    ``eos_token_id`` is the legacy 2, as transformers does)."""
    if siglip:
        return len(token_ids) - 1
    if eos_token_id == 2:
        return max(range(len(token_ids)), key=token_ids.__getitem__)
    return token_ids.index(eos_token_id) if eos_token_id in token_ids else 0
