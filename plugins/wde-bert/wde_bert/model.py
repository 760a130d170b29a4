"""The BERT encoder over packed sequences, with HF checkpoint names mapped onto it."""

from __future__ import annotations

import re

import torch
from torch import nn

from wde_core.plugin_api import (ColumnParallelLinear, LayerNorm, Linear, RowParallelLinear, VocabParallelEmbedding,
                                 tensor_parallel)

_LAYER = re.compile(r"^encoder\.layer\.(\d+)\.(.+)\.(weight|bias)$")
# HF per-layer module -> (our module, index of the stacked QKV slice or None)
_LAYER_NAMES = {"attention.self.query": ("qkv", 0), "attention.self.key": ("qkv", 1),
                "attention.self.value": ("qkv", 2), "attention.output.dense": ("attn_out", None),
                "attention.output.LayerNorm": ("attn_norm", None), "intermediate.dense": ("ffn_in", None),
                "output.dense": ("ffn_out", None), "output.LayerNorm": ("ffn_norm", None)}


class BertEmbeddings(nn.Module):
    """Word + absolute position + token type embeddings, then LayerNorm."""

    def __init__(self, config) -> None:
        super().__init__()
        self.word_embeddings = VocabParallelEmbedding(config.vocab_size, config.hidden_size)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, config.hidden_size)
        self.LayerNorm = LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(self, input_ids, positions, token_type_ids) -> torch.Tensor:
        """Embed packed tokens ``[T]`` into ``[T, H]``."""
        x = self.word_embeddings(input_ids) + self.position_embeddings(positions)
        if token_type_ids is None:
            x = x + self.token_type_embeddings.weight[0]
        else:
            x = x + self.token_type_embeddings(token_type_ids)
        return self.LayerNorm(x)


class BertLayer(nn.Module):
    """Post-norm transformer layer: fused QKV, varlen attention, GELU feed-forward (heads and feed-forward
    split across the ranks under tensor parallelism)."""

    def __init__(self, config, attention) -> None:
        super().__init__()
        hidden, tp = config.hidden_size, tensor_parallel()
        self.num_heads = tp.split(config.num_attention_heads, "num_attention_heads")
        self.head_dim = hidden // config.num_attention_heads
        tp.split(config.intermediate_size, "intermediate_size")
        self.attention = attention
        self.qkv = ColumnParallelLinear(hidden, (hidden, hidden, hidden))
        self.attn_out = RowParallelLinear(hidden, hidden)
        self.attn_norm = LayerNorm(hidden, eps=config.layer_norm_eps)
        self.ffn_in = ColumnParallelLinear(hidden, config.intermediate_size, activation=config.hidden_act)
        self.ffn_out = RowParallelLinear(config.intermediate_size, hidden)
        self.ffn_norm = LayerNorm(hidden, eps=config.layer_norm_eps)

    def forward(self, x: torch.Tensor, attn_metadata) -> torch.Tensor:
        """One layer over the packed tokens ``x [T, H]``."""
        tokens = x.shape[0]
        q, k, v = self.qkv(x).view(tokens, 3, self.num_heads, self.head_dim).unbind(1)
        attended = self.attention.forward(q, k, v, attn_metadata).reshape(tokens, -1)
        x = self.attn_norm(self.attn_out(attended, residual=x))
        return self.ffn_norm(self.ffn_out(self.ffn_in(x), residual=x))


class BertEncoder(nn.Module):
    """``BertModel`` without its pooler: packed tokens in, last hidden states ``[T, H]`` out."""

    supports_tensor_parallel = True
    takes_padding_rows = True  # the core's CPU row padding: dropped below, before any head sees the states
    pipeline_layers, pipeline_inputs = "layers", ("embeddings",)  # cut points (wde-pipeline-parallel)
    checkpoint_prefix = "bert."
    skipped_prefixes = ("pooler.", "cls.", "embeddings.position_ids")

    def __init__(self, config, attention, settings=None) -> None:
        super().__init__()
        kind = getattr(config, "position_embedding_type", "absolute")
        if kind != "absolute":
            raise ValueError(f"{type(self).__name__} supports absolute position embeddings, not {kind!r}")
        self.hidden_size = config.hidden_size
        self.embeddings = BertEmbeddings(config)
        self.layers = nn.ModuleList(BertLayer(config, attention) for _ in range(config.num_hidden_layers))

    def forward(self, model_input) -> torch.Tensor:
        """Last hidden states ``[T, H]`` of every packed token."""
        x = self.embeddings(model_input.input_ids, model_input.positions, model_input.token_type_ids)
        for layer in self.layers:
            x = layer(x, model_input.attn_metadata)
        return model_input.drop_padding(x)

    def map_checkpoint_name(self, name: str):
        """Map an HF checkpoint name to ``(parameter, rows)``; ``None`` for weights not used."""
        name = name.removeprefix(self.checkpoint_prefix)
        name = name.replace("LayerNorm.gamma", "LayerNorm.weight").replace("LayerNorm.beta", "LayerNorm.bias")
        if name.startswith(self.skipped_prefixes):
            return None
        match = _LAYER.match(name)
        if match is None:
            return name, None
        index, module, kind = match.groups()
        ours, part = _LAYER_NAMES.get(module, (module, None))
        rows = None if part is None else slice(part * self.hidden_size, (part + 1) * self.hidden_size)
        return f"layers.{index}.{ours}.{kind}", rows


class BertTokenClassifier(BertEncoder):
    """``BertForTokenClassification``: the encoder, then ``classifier`` on every token; its forward returns the
    logits ``[T, num_labels]`` as the token states (the core's token_classify task reads them as such)."""

    takes_padding_rows = True

    def __init__(self, config, attention, settings=None) -> None:
        super().__init__(config, attention, settings)
        self.classifier = Linear(config.hidden_size, config.num_labels)

    def forward(self, model_input) -> torch.Tensor:
        """Per-token logits ``[T, num_labels]``."""
        return self.classifier(super().forward(model_input))
