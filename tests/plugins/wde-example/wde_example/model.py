"""``ExampleBagOfEmbeddings``: a word-embedding lookup and a LayerNorm over the packed tokens.

It follows the contract of every wde model class: ``Model(config, attention, settings)``,
``forward(model_input) -> [T, H]`` and ``map_checkpoint_name(name)``. It attends to nothing, so
it ignores ``attention``, positions and token types.
"""

from __future__ import annotations

import torch
from torch import nn

# checkpoint name -> parameter name
CHECKPOINT_NAMES = {
    "embeddings.word_embeddings.weight": "embed.weight",
    "embeddings.LayerNorm.weight": "norm.weight",
    "embeddings.LayerNorm.bias": "norm.bias",
}


class BagOfEmbeddings(nn.Module):
    """Each token's embedding, layer-normalized; pooling (mean by default) does the rest."""

    def __init__(self, config, attention=None, settings=None) -> None:
        super().__init__()
        self.embed = nn.Embedding(config.vocab_size, config.hidden_size)
        self.norm = nn.LayerNorm(config.hidden_size, eps=getattr(config, "layer_norm_eps", 1e-12))

    def forward(self, model_input) -> torch.Tensor:
        return self.norm(self.embed(model_input.input_ids))

    def map_checkpoint_name(self, name: str):
        """Map a checkpoint name to ``(parameter, None)``; unknown names are left for the loader
        to report as unexpected."""
        return CHECKPOINT_NAMES.get(name, name), None
