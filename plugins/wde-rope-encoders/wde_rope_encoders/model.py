"""NomicBert and GTE v2 over packed sequences: post-norm layers, RoPE on queries and keys, gated feed-forward."""

from __future__ import annotations

import re

import torch
from torch import nn
from transformers.activations import ACT2FN

from wde_core.plugin_api import Linear, RotaryTables, head_dim, rope_type, rotate
from wde_rope_encoders.original import adopt_original_keys

_PREFIXES = ("nomic_bert.", "gte.", "new.")
_SKIPPED = ("pooler.", "cls.", "lm_head.", "classifier.", "embeddings.position_ids", "embeddings.token_type_ids")
_LAYER = re.compile(r"^(?:encoder\.)?layers?\.(\d+)\.(.+)\.(weight|bias)$")
# checkpoint per-layer module (transformers' names, then the original remote-code names) -> (ours, part)
# part: index of a stacked slice (qkv: q, k, v; up_gate: up, gate), None for the whole parameter
_LAYER_NAMES = {
    "self_attn.q_proj": ("qkv", 0), "self_attn.k_proj": ("qkv", 1), "self_attn.v_proj": ("qkv", 2),
    "self_attn.o_proj": ("o_proj", None), "mlp.up_proj": ("up_gate", 0), "mlp.gate_proj": ("up_gate", 1),
    "mlp.down_proj": ("down_proj", None), "post_attention_layernorm": ("post_attention_layernorm", None),
    "post_mlp_layernorm": ("post_mlp_layernorm", None),
    # nomic-ai remote code (NomicBertModel as published): fc11 is the up projection, fc12 the gate
    "attn.Wqkv": ("qkv", None), "attn.out_proj": ("o_proj", None), "mlp.fc11": ("up_gate", 0),
    "mlp.fc12": ("up_gate", 1), "mlp.fc2": ("down_proj", None), "norm1": ("post_attention_layernorm", None),
    "norm2": ("post_mlp_layernorm", None),
    # Alibaba-NLP remote code (NewModel)
    "attention.qkv_proj": ("qkv", None), "attention.o_proj": ("o_proj", None), "mlp.up_gate_proj": ("up_gate", None),
    "attn_ln": ("post_attention_layernorm", None), "mlp_ln": ("post_mlp_layernorm", None),
}


def has_biases(config) -> bool:
    """NomicBert has no linear biases; GTE has them on the attention projections and the down projection."""
    return config.model_type != "nomic_bert"


class RopeEncoderEmbeddings(nn.Module):
    """Word (+ token type, when the config has any) embeddings, then LayerNorm; no absolute positions."""

    def __init__(self, config) -> None:
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size)
        types = getattr(config, "type_vocab_size", 0) or 0
        self.token_type_embeddings = nn.Embedding(types, config.hidden_size) if types else None
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(self, input_ids, token_type_ids) -> torch.Tensor:
        """Embed packed tokens ``[T]`` into ``[T, H]``."""
        x = self.word_embeddings(input_ids)
        if self.token_type_embeddings is not None:
            if token_type_ids is None:
                x = x + self.token_type_embeddings.weight[0]
            else:
                x = x + self.token_type_embeddings(token_type_ids)
        return self.LayerNorm(x)


class RopeEncoderLayer(nn.Module):
    """Post-norm layer: fused QKV with RoPE, varlen attention, gated feed-forward (``act(gate) * up``)."""

    def __init__(self, config, attention) -> None:
        super().__init__()
        hidden, bias = config.hidden_size, has_biases(config)
        self.num_heads, self.head_dim = config.num_attention_heads, head_dim(config)
        inner = self.num_heads * self.head_dim
        self.intermediate = config.intermediate_size
        self.attention = attention
        self.qkv = Linear(hidden, 3 * inner, bias=bias)
        self.o_proj = Linear(inner, hidden, bias=bias)
        self.post_attention_layernorm = nn.LayerNorm(hidden, eps=config.layer_norm_eps)
        self.up_gate = Linear(hidden, 2 * config.intermediate_size, bias=False)
        self.act = ACT2FN[config.hidden_act]
        self.down_proj = Linear(config.intermediate_size, hidden, bias=bias)
        self.post_mlp_layernorm = nn.LayerNorm(hidden, eps=config.layer_norm_eps)

    def forward(self, x: torch.Tensor, cos, sin, attn_metadata) -> torch.Tensor:
        """One layer over the packed tokens ``x [T, H]``."""
        tokens = x.shape[0]
        q, k, v = self.qkv(x).view(tokens, 3, self.num_heads, self.head_dim).unbind(1)
        attended = self.attention.forward(rotate(q, cos, sin), rotate(k, cos, sin), v, attn_metadata)
        x = self.post_attention_layernorm(self.o_proj(attended.reshape(tokens, -1), residual=x))
        up, gate = self.up_gate(x).split(self.intermediate, dim=-1)
        return self.post_mlp_layernorm(self.down_proj(self.act(gate) * up, residual=x))


class RopeEncoder(nn.Module):
    """``NomicBertModel`` / ``GteModel`` without a pooler: packed tokens in, last hidden states ``[T, H]`` out."""

    takes_padding_rows = True  # the core's CPU row padding (ModelInput.padding), dropped by the trunk's forward

    def __init__(self, config, attention, settings=None) -> None:
        super().__init__()
        config = adopt_original_keys(config)  # nomic-ai's remote-code config keys, if that is how it is written
        rope_type(config)  # refuse an unsupported RoPE before allocating anything
        max_len = getattr(settings, "max_model_len", None) or config.max_position_embeddings
        self.embeddings = RopeEncoderEmbeddings(config)
        self.rotary = RotaryTables(config, max_len)
        self.layers = nn.ModuleList(RopeEncoderLayer(config, attention) for _ in range(config.num_hidden_layers))
        self._inner = self.layers[0].num_heads * self.layers[0].head_dim
        self._intermediate = config.intermediate_size

    def forward(self, model_input) -> torch.Tensor:
        """Last hidden states of every packed token; positions restart at 0 in each sequence."""
        x = self.embeddings(model_input.input_ids, model_input.token_type_ids)
        cos, sin = self.rotary(model_input.positions)
        for layer in self.layers:
            x = layer(x, cos, sin, model_input.attn_metadata)
        return model_input.drop_padding(x)

    def after_load_weights(self) -> None:
        """Compute the RoPE tables (buffers come out of meta construction empty)."""
        self.rotary.compute()

    def map_checkpoint_name(self, name: str):
        """Map a checkpoint name to ``(parameter, rows)``; ``None`` for poolers, heads and buffers."""
        for prefix in _PREFIXES:
            name = name.removeprefix(prefix)
        name = name.replace("emb_ln.", "embeddings.LayerNorm.")
        if name.startswith(_SKIPPED) or name.endswith("inv_freq"):
            return None
        match = _LAYER.match(name)
        if match is None:
            return name, None
        index, module, kind = match.groups()
        ours, part = _LAYER_NAMES.get(module, (module, None))
        if part is None:
            return f"layers.{index}.{ours}.{kind}", None
        size = self._inner if ours == "qkv" else self._intermediate
        return f"layers.{index}.{ours}.{kind}", slice(part * size, (part + 1) * size)


class RopeCrossEncoder(RopeEncoder):
    """``GteForSequenceClassification`` / ``NomicBertForSequenceClassification``: the first token -> pooler
    (dense + tanh) -> classifier, as HF's heads do."""

    takes_padding_rows = True  # the core's CPU row padding (ModelInput.padding), dropped by the trunk's forward

    def __init__(self, config, attention, settings=None) -> None:
        super().__init__(config, attention, settings)
        hidden = self.embeddings.word_embeddings.embedding_dim
        self.pooler = nn.Module()
        self.pooler.dense = Linear(hidden, hidden, activation="tanh")
        self.classifier = Linear(hidden, config.num_labels)

    def map_checkpoint_name(self, name: str):
        """The head's names (``pooler.dense``, ``classifier``) after the encoder prefix; the rest as the encoder."""
        for prefix in _PREFIXES:
            name = name.removeprefix(prefix)
        if name.startswith(("pooler.", "classifier.")):
            return name, None
        return super().map_checkpoint_name(name)

    def head(self, pooled: torch.Tensor) -> torch.Tensor:
        """Logits ``[B, num_labels]`` from the pooled (first-token) states."""
        return self.classifier(self.pooler.dense(pooled))
