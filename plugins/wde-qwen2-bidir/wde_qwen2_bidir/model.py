"""The decoder over packed sequences: Qwen2, Qwen3, Llama and Mistral differ only by their configs.

Pre-norm layers of RoPE attention (grouped key/value heads, fused q/k/v) and a SwiGLU feed-forward
(fused gate/up), RMSNorm; Qwen3 adds a per-head RMSNorm of q and k before RoPE. Whether attention is causal is the attention backend's business: the
builder puts ``settings.causal`` into the metadata, and no code here looks at it.
"""

from __future__ import annotations

import re

import torch
from torch import nn
from transformers.activations import ACT2FN

from wde_core.plugin_api import ColumnParallelLinear, RowParallelLinear, VocabParallelEmbedding, tensor_parallel
from wde_core.plugin_api import RMSNorm, RotaryTables, head_dim, rope_type, rotate

_LAYER = re.compile(r"^layers\.(\d+)\.(self_attn|mlp)\.(q_proj|k_proj|v_proj|gate_proj|up_proj)\.(weight|bias)$")
_SKIPPED = ("lm_head.",)


def projection_biases(config) -> tuple[bool, bool, bool]:
    """``(q/k/v bias, o_proj bias, MLP bias)``: Qwen2 always biases q/k/v and nothing else; Llama
    and Mistral follow ``attention_bias`` and ``mlp_bias`` (absent means no bias)."""
    if config.model_type == "qwen2":
        return True, False, False
    if config.model_type == "qwen3":  # attention_bias on q/k/v and o_proj; the MLP never has biases
        attention_bias = bool(getattr(config, "attention_bias", False))
        return attention_bias, attention_bias, False
    attention_bias = bool(getattr(config, "attention_bias", False))
    return attention_bias, attention_bias, bool(getattr(config, "mlp_bias", False))


class DecoderAttention(nn.Module):
    """Fused q/k/v projection (q rows, then k rows, then v rows), RoPE, the engine's backend, o_proj; with
    tensor parallelism a rank holds its share of the q heads and of the key/value heads."""

    def __init__(self, config, attention) -> None:
        super().__init__()
        qkv_bias, o_bias, _ = projection_biases(config)
        tp = tensor_parallel()
        self.attention = attention
        self.num_heads = tp.split(config.num_attention_heads, "num_attention_heads")
        self.num_kv_heads = tp.split(config.num_key_value_heads, "num_key_value_heads")
        self.head_dim = head_dim(config)
        self.q_size, self.kv_size = self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
        q, kv = self.q_size * tp.size, self.kv_size * tp.size
        self.qkv_proj = ColumnParallelLinear(config.hidden_size, (q, kv, kv), bias=qkv_bias)
        self.o_proj = RowParallelLinear(q, config.hidden_size, bias=o_bias)
        self.qk_norm = config.model_type == "qwen3"  # Qwen3: RMSNorm over each q and k head, before RoPE
        if self.qk_norm:
            self.q_norm = RMSNorm(self.head_dim, config.rms_norm_eps)
            self.k_norm = RMSNorm(self.head_dim, config.rms_norm_eps)

    def forward(self, x, cos, sin, attn_metadata, residual) -> torch.Tensor:
        """``residual + o_proj(attention(x))`` over the packed tokens."""
        tokens = x.shape[0]
        qk, v = self.qkv_proj(x).split((self.q_size + self.kv_size, self.kv_size), dim=-1)
        qk = qk.view(tokens, self.num_heads + self.num_kv_heads, self.head_dim)
        if self.qk_norm:
            q, k = qk.split((self.num_heads, self.num_kv_heads), dim=1)
            qk = torch.cat((self.q_norm(q), self.k_norm(k)), dim=1)
        qk = rotate(qk, cos, sin)  # q and k at once
        q, k = qk.split((self.num_heads, self.num_kv_heads), dim=1)
        v = v.view(tokens, self.num_kv_heads, self.head_dim)
        attended = self.attention.forward(q, k, v, attn_metadata)
        return self.o_proj(attended.reshape(tokens, self.q_size), residual=residual)


class DecoderMLP(nn.Module):
    """SwiGLU: ``down(act(gate(x)) * up(x))`` with gate and up fused into one projection."""

    def __init__(self, config) -> None:
        super().__init__()
        _, _, bias = projection_biases(config)
        size = config.intermediate_size
        self.intermediate_size = tensor_parallel().split(size, "intermediate_size")
        self.gate_up_proj = ColumnParallelLinear(config.hidden_size, (size, size), bias=bias)
        self.down_proj = RowParallelLinear(size, config.hidden_size, bias=bias)
        self.act = ACT2FN[config.hidden_act]

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        """``residual + down(act(gate) * up)``."""
        gate, up = self.gate_up_proj(x).split(self.intermediate_size, dim=-1)
        return self.down_proj(self.act(gate) * up, residual=residual)


class DecoderLayer(nn.Module):
    """Pre-norm decoder layer: attention and feed-forward, each added to the residual stream."""

    def __init__(self, config, attention) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.self_attn = DecoderAttention(config, attention)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mlp = DecoderMLP(config)

    def forward(self, x, cos, sin, attn_metadata) -> torch.Tensor:
        """One layer over the packed tokens ``x [T, H]``."""
        x = self.self_attn(self.input_layernorm(x), cos, sin, attn_metadata, residual=x)
        return self.mlp(self.post_attention_layernorm(x), residual=x)


class DecoderEmbedder(nn.Module):
    """A Qwen2/Qwen3/Llama/Mistral base model: packed tokens in, final-norm hidden states ``[T, H]`` out.

    Loads ``*Model`` and ``*ForCausalLM`` checkpoints alike: the ``model.`` prefix is dropped and
    the language-model head is skipped. Supports tensor parallelism (``wde_core.plugin_api`` parallel layers).
    """

    takes_padding_rows = True  # the core's CPU row padding (ModelInput.padding), dropped by the trunk's forward

    supports_tensor_parallel = True
    pipeline_layers, pipeline_inputs = "layers", ("embed_tokens",)  # cut points (wde-pipeline-parallel)

    def __init__(self, config, attention, settings=None) -> None:
        super().__init__()
        rope_type(config)  # refuse an unsupported RoPE before allocating anything
        max_len = getattr(settings, "max_model_len", None) or config.max_position_embeddings
        self.embed_tokens = VocabParallelEmbedding(config.vocab_size, config.hidden_size)
        self.rotary = RotaryTables(config, max_len)
        self.layers = nn.ModuleList(DecoderLayer(config, attention) for _ in range(config.num_hidden_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self._fused_rows = _fused_rows(config)

    def forward(self, model_input) -> torch.Tensor:
        """Last hidden states of every packed token; positions restart at 0 in each sequence."""
        return model_input.drop_padding(self.decode(self.embed_tokens(model_input.input_ids), model_input))

    def decode(self, x: torch.Tensor, model_input, rotary: tuple[torch.Tensor, torch.Tensor] | None = None,
               after_layer=None) -> torch.Tensor:
        """The layers and final norm over input embeddings ``x [T, H]`` (a vision-language model's, images in);
        ``rotary``: cos and sin ``[T, head_dim]`` of the model's own (multimodal) positions, else the tables';
        ``after_layer(index, x)``: the hidden states after layer ``index`` (Qwen3-VL adds image features there)."""
        cos, sin = rotary if rotary is not None else self.rotary(model_input.positions)
        for index, layer in enumerate(self.layers):
            x = layer(x, cos, sin, model_input.attn_metadata)
            if after_layer is not None:
                x = after_layer(index, x)
        return self.norm(x)

    def after_load_weights(self) -> None:
        """Compute the RoPE tables (buffers come out of meta construction empty)."""
        self.rotary.compute()

    def map_checkpoint_name(self, name: str):
        """Map an HF checkpoint name to ``(parameter, rows)``; ``None`` for the LM head and RoPE buffers."""
        name = name.removeprefix("model.")
        if name.startswith(_SKIPPED) or name.endswith("rotary_emb.inv_freq"):
            return None
        match = _LAYER.match(name)
        if match is None:
            return name, None
        index, block, projection, kind = match.groups()
        fused, rows = self._fused_rows[projection]
        return f"layers.{index}.{block}.{fused}.{kind}", rows


def _fused_rows(config) -> dict[str, tuple[str, slice]]:
    """HF projection -> (our fused projection, its rows in the whole, unsplit projection)."""
    q, kv, intermediate = (config.num_attention_heads * head_dim(config), config.num_key_value_heads * head_dim(config),
                           config.intermediate_size)
    return {
        "q_proj": ("qkv_proj", slice(0, q)),
        "k_proj": ("qkv_proj", slice(q, q + kv)),
        "v_proj": ("qkv_proj", slice(q + kv, q + 2 * kv)),
        "gate_proj": ("gate_up_proj", slice(0, intermediate)),
        "up_proj": ("gate_up_proj", slice(intermediate, 2 * intermediate)),
    }
