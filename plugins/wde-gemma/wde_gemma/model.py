"""Gemma over packed sequences: scaled embeddings, RMSNorms ``(1 + w)``, GQA, RoPE, GeGLU. Gemma 3 text adds
sandwich norms, q/k head norms, sliding-window local layers with their own RoPE theta, and is bidirectional
for EmbeddingGemma; Gemma (1) is the plain pre-norm decoder (bge-reranker-v2-gemma)."""

from __future__ import annotations

import re
from types import SimpleNamespace

import torch
from torch import nn
from transformers.activations import ACT2FN

from wde_core.plugin_api import Linear, RMSNorm, RotaryTables, rotate

_LAYER = re.compile(r"^layers\.(\d+)\.(self_attn|mlp)\.(\w+)\.(weight|bias)$")
_NORMS = ("input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm", "post_feedforward_layernorm")


def configure(propose, directory, args) -> None:
    """Attention is bidirectional when ``use_bidirectional_attention`` is set (EmbeddingGemma), else causal."""
    bidirectional = bool(getattr(directory.config, "use_bidirectional_attention", False))
    propose.suggest("causal", not bidirectional, f"config.json use_bidirectional_attention={bidirectional}")


def layer_types(config) -> list[str]:
    """Each layer's attention: Gemma 3's ``layer_types``, else every layer global."""
    return list(getattr(config, "layer_types", None) or ["full_attention"] * config.num_hidden_layers)


def _rope_config(config, layer_type: str):
    """A config view with the RoPE parameters of one layer type, as :class:`RotaryTables` reads them."""
    params = dict(config.rope_parameters.get(layer_type, config.rope_parameters))
    if params.get("rope_type", "default") != "default":
        raise ValueError(f"gemma3: RoPE {params!r} for {layer_type} layers is not supported by wde-gemma "
                         "(supported: default)")
    return SimpleNamespace(model_type=config.model_type, rope_parameters=params, head_dim=config.head_dim,
                           hidden_size=config.hidden_size, num_attention_heads=config.num_attention_heads)


class GemmaLayer(nn.Module):
    """Attention (fused QKV, RoPE; Gemma 3: q/k norms, a window on local layers) and GeGLU, pre-normed;
    Gemma 3 also norms each branch's output before the residual add ("sandwich")."""

    def __init__(self, config, attention, layer_type: str) -> None:
        super().__init__()
        hidden, self.head_dim = config.hidden_size, config.head_dim
        self.heads, self.kv_heads = config.num_attention_heads, config.num_key_value_heads
        self.layer_type, self.attention = layer_type, attention
        self.sandwich = config.model_type.startswith("gemma3")
        self.scale = (getattr(config, "query_pre_attn_scalar", None) or self.head_dim) ** -0.5
        # HF: |i - j| < sliding_window when bidirectional, 0 <= i - j < sliding_window when causal
        self.window = config.sliding_window - 1 if layer_type == "sliding_attention" else None
        self.qkv = Linear(hidden, (self.heads + 2 * self.kv_heads) * self.head_dim, bias=config.attention_bias)
        self.o_proj = Linear(self.heads * self.head_dim, hidden, bias=config.attention_bias)
        if self.sandwich:
            self.q_norm = RMSNorm(self.head_dim, config.rms_norm_eps, unit_offset=True)
            self.k_norm = RMSNorm(self.head_dim, config.rms_norm_eps, unit_offset=True)
        self.intermediate = config.intermediate_size
        self.gate_up = Linear(hidden, 2 * self.intermediate, bias=False)
        self.act = ACT2FN[getattr(config, "hidden_activation", None) or config.hidden_act]
        self.down_proj = Linear(self.intermediate, hidden, bias=False)
        for name in _NORMS if self.sandwich else _NORMS[:2]:  # Gemma: post_attention_layernorm is the MLP's pre-norm
            setattr(self, name, RMSNorm(hidden, config.rms_norm_eps, unit_offset=True))

    def forward(self, x: torch.Tensor, rope: dict, attn_metadata) -> torch.Tensor:
        """One layer over the packed tokens ``x [T, H]``."""
        tokens, d = x.shape[0], self.head_dim
        q, k, v = self.qkv(self.input_layernorm(x)).split([self.heads * d, self.kv_heads * d, self.kv_heads * d], -1)
        q, k = q.reshape(tokens, self.heads, d), k.reshape(tokens, self.kv_heads, d)
        if self.sandwich:
            q, k = self.q_norm(q), self.k_norm(k)
        attended = self.attention.forward(rotate(q, *rope[self.layer_type]), rotate(k, *rope[self.layer_type]),
                                          v.reshape(tokens, self.kv_heads, d), attn_metadata, scale=self.scale,
                                          window=self.window).reshape(tokens, -1)
        if not self.sandwich:
            x = self.o_proj(attended, residual=x)
            gate, up = self.gate_up(self.post_attention_layernorm(x)).split(self.intermediate, dim=-1)
            return self.down_proj(self.act(gate) * up, residual=x)
        x = x + self.post_attention_layernorm(self.o_proj(attended))
        gate, up = self.gate_up(self.pre_feedforward_layernorm(x)).split(self.intermediate, dim=-1)
        return x + self.post_feedforward_layernorm(self.down_proj(self.act(gate) * up))


class GemmaEmbedder(nn.Module):
    """``Gemma3TextModel`` / ``GemmaModel``: packed tokens in, last hidden states (after the final norm) ``[T, H]``."""

    takes_padding_rows = True  # the core's CPU row padding (ModelInput.padding), dropped by the trunk's forward

    def __init__(self, config, attention, settings=None) -> None:
        super().__init__()
        if getattr(config, "attn_logit_softcapping", None) is not None:
            raise ValueError("gemma3: attn_logit_softcapping is not supported by wde-gemma")
        kinds = layer_types(config)
        max_len = (getattr(settings, "max_model_len", None) or config.max_position_embeddings) + \
            getattr(settings, "position_offset", 0)  # PaliGemma counts positions from 1
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.embed_scale = config.hidden_size ** 0.5
        self.rotary = nn.ModuleDict({kind: RotaryTables(_rope_config(config, kind), max_len)
                                     for kind in sorted(set(kinds))})
        self.layers = nn.ModuleList(GemmaLayer(config, attention, kind) for kind in kinds)
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps, unit_offset=True)
        first = self.layers[0]
        self._rows = {"q_proj": (0, first.heads), "k_proj": (first.heads, first.kv_heads),
                      "v_proj": (first.heads + first.kv_heads, first.kv_heads)}

    def forward(self, model_input) -> torch.Tensor:
        """Last hidden states of every packed token; positions restart at 0 in each sequence."""
        return model_input.drop_padding(self.decode(self.scaled_embeddings(model_input.input_ids), model_input))

    def scaled_embeddings(self, input_ids: torch.Tensor) -> torch.Tensor:
        """The tokens' embeddings times ``sqrt(hidden_size)`` (in the embeddings' dtype, as transformers does)."""
        x = self.embed_tokens(input_ids)
        return x * torch.tensor(self.embed_scale, dtype=x.dtype)

    def decode(self, x: torch.Tensor, model_input) -> torch.Tensor:
        """The layers and the final norm over input embeddings ``x [T, H]`` (a vision-language model's image
        features among them) at ``model_input``'s positions and attention."""
        rope = {kind: tables(model_input.positions) for kind, tables in self.rotary.items()}
        for layer in self.layers:
            x = layer(x, rope, model_input.attn_metadata)
        return self.norm(x)

    def after_load_weights(self) -> None:
        """Compute the RoPE tables (buffers come out of meta construction empty)."""
        for tables in self.rotary.values():
            tables.compute()

    def map_checkpoint_name(self, name: str):
        """Map a checkpoint name to ``(parameter, rows)``: q/k/v into the fused QKV, gate/up into ``gate_up``."""
        name = name.removeprefix("model.")
        if name.startswith("lm_head."):
            return None
        match = _LAYER.match(name)
        if match is None:
            return name, None
        index, _, module, kind = match.groups()
        head_dim, inter = self.layers[0].head_dim, self.layers[0].intermediate
        if module in self._rows:
            first, count = self._rows[module]
            return f"layers.{index}.qkv.{kind}", slice(first * head_dim, (first + count) * head_dim)
        if module in ("gate_proj", "up_proj"):
            part = 0 if module == "gate_proj" else 1
            return f"layers.{index}.gate_up.weight", slice(part * inter, (part + 1) * inter)
        return f"layers.{index}.{module}.{kind}", None
