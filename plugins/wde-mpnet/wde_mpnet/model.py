"""The MPNet encoder over packed sequences: BERT's post-norm layers plus a relative position bias."""

from __future__ import annotations

import re

import torch
from torch import nn

from wde_bert.public import BertLayer
from wde_mpnet.attention import BiasedAttention, RelativePositionBias

_LAYER = re.compile(r"^encoder\.layer\.(\d+)\.(.+)\.(weight|bias)$")
# HF per-layer module -> (our module in BertLayer, index of the stacked QKV slice or None)
_LAYER_NAMES = {
    "attention.attn.q": ("qkv", 0),
    "attention.attn.k": ("qkv", 1),
    "attention.attn.v": ("qkv", 2),
    "attention.attn.o": ("attn_out", None),
    "attention.LayerNorm": ("attn_norm", None),
    "intermediate.dense": ("ffn_in", None),
    "output.dense": ("ffn_out", None),
    "output.LayerNorm": ("ffn_norm", None),
}


class MPNetEmbeddings(nn.Module):
    """Word + absolute position embeddings (no token types), then LayerNorm."""

    def __init__(self, config) -> None:
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Embed packed tokens ``[T]`` into ``[T, H]``."""
        return self.LayerNorm(self.word_embeddings(input_ids) + self.position_embeddings(positions))


class MPNetEncoder(nn.Module):
    """``MPNetModel`` without its pooler: packed tokens in, last hidden states ``[T, H]`` out.

    Positions count from ``padding_idx + 1`` within each packed sequence (the link's ``position_offset``).
    The relative position bias (one table, shared by every layer, as in HF) goes to the engine's attention
    backend as a description; the backend adds it to the scores.
    """

    takes_padding_rows = True  # the core's CPU row padding (ModelInput.padding), dropped by the trunk's forward

    checkpoint_prefix = "mpnet."
    skipped_prefixes = ("pooler.", "lm_head.", "embeddings.position_ids")

    def __init__(self, config, attention, settings=None) -> None:
        super().__init__()
        self.hidden_size = config.hidden_size
        self.attention = BiasedAttention(attention)
        self.embeddings = MPNetEmbeddings(config)
        self.layers = nn.ModuleList(BertLayer(config, self.attention) for _ in range(config.num_hidden_layers))
        self.position_bias = RelativePositionBias(config.relative_attention_num_buckets, config.num_attention_heads)

    def forward(self, model_input) -> torch.Tensor:
        """Last hidden states ``[T, H]`` of every packed token."""
        x = self.embeddings(model_input.input_ids, model_input.positions)
        self.attention.bias = self.position_bias.describe()
        for layer in self.layers:
            x = layer(x, model_input.attn_metadata)
        return model_input.drop_padding(x)

    def map_checkpoint_name(self, name: str):
        """Map an HF checkpoint name to ``(parameter, rows)``; ``None`` for weights not used."""
        name = name.removeprefix(self.checkpoint_prefix)
        if name.startswith(self.skipped_prefixes):
            return None
        if name.startswith("encoder.relative_attention_bias."):
            return "position_bias." + name.removeprefix("encoder."), None
        match = _LAYER.match(name)
        if match is None:
            return name, None
        index, module, kind = match.groups()
        ours, part = _LAYER_NAMES.get(module, (module, None))
        rows = None if part is None else slice(part * self.hidden_size, (part + 1) * self.hidden_size)
        return f"layers.{index}.{ours}.{kind}", rows
