"""ModernBERT over packed sequences: pre-norm layers alternating global and sliding-window (local) attention,
RoPE with a theta per attention kind, GeGLU feed-forward, a final LayerNorm; and the sequence-classification head."""

from __future__ import annotations

from types import SimpleNamespace

import torch
from torch import nn
from transformers.activations import ACT2FN

from wde_core.plugin_api import Linear, RotaryTables, rope_type
from wde_core.plugin_api import rotate as rotate_half

GLOBAL, LOCAL = "full_attention", "sliding_attention"
_HEADS = ("head.", "decoder.", "classifier.")  # the MLM head and decoder, the classifier head


def layer_types(config) -> list[str]:
    """Each layer's attention kind: ``config.layer_types``, else every ``global_attn_every_n_layers``-th global."""
    kinds = getattr(config, "layer_types", None)
    if kinds is None:
        every = getattr(config, "global_attn_every_n_layers", 3)
        kinds = [LOCAL if i % every else GLOBAL for i in range(config.num_hidden_layers)]
    unknown = set(kinds) - {GLOBAL, LOCAL}
    if unknown:
        raise ValueError(f"ModernBERT: layer types {sorted(unknown)} are not supported (only {GLOBAL}, {LOCAL})")
    return list(kinds)


def local_window(config) -> int:
    """Keys a local layer sees on each side: ``local_attention // 2`` (HF's ``|i - j| <= sliding_window``)."""
    return int(config.local_attention) // 2


def rope_config(config, kind: str) -> SimpleNamespace:
    """A config holding one attention kind's RoPE parameters, as ``wde_core.modeling.rope`` reads them."""
    params = dict((getattr(config, "rope_parameters", None) or {}).get(kind) or {})
    theta_key = "global_rope_theta" if kind == GLOBAL else "local_rope_theta"
    params.setdefault("rope_theta", getattr(config, theta_key, None) or (160000.0 if kind == GLOBAL else 10000.0))
    params.setdefault("rope_type", "default")
    view = SimpleNamespace(model_type=config.model_type, hidden_size=config.hidden_size, rope_parameters=params,
                           num_attention_heads=config.num_attention_heads, head_dim=None)
    if rope_type(view) != "default":
        raise ValueError(f"ModernBERT: RoPE type {params['rope_type']!r} is not supported by wde-modernbert "
                         "(only 'default')")
    return view


def layer_norm(config) -> nn.LayerNorm:
    """ModernBERT's LayerNorm: no bias unless ``norm_bias``."""
    return nn.LayerNorm(config.hidden_size, eps=config.norm_eps, bias=config.norm_bias)


class ModernBertLayer(nn.Module):
    """Pre-norm layer: fused QKV with RoPE, attention (within ``window`` for a local layer), GeGLU feed-forward."""

    def __init__(self, config, attention, index: int, kind: str) -> None:
        super().__init__()
        hidden = config.hidden_size
        self.num_heads, self.head_dim = config.num_attention_heads, hidden // config.num_attention_heads
        self.intermediate, self.kind = config.intermediate_size, kind
        self.window = local_window(config) if kind == LOCAL else None
        self.attention = attention
        self.attn_norm = nn.Identity() if index == 0 else layer_norm(config)
        self.attn = nn.Module()
        self.attn.Wqkv = Linear(hidden, 3 * hidden, bias=config.attention_bias)
        self.attn.Wo = Linear(hidden, hidden, bias=config.attention_bias)
        self.mlp_norm = layer_norm(config)
        self.mlp = nn.Module()
        self.mlp.Wi = Linear(hidden, 2 * config.intermediate_size, bias=config.mlp_bias)
        self.mlp.Wo = Linear(config.intermediate_size, hidden, bias=config.mlp_bias)
        self.act = ACT2FN[config.hidden_activation]

    def forward(self, x: torch.Tensor, cos, sin, attn_metadata) -> torch.Tensor:
        """One layer over the packed tokens ``x [T, H]``."""
        tokens = x.shape[0]
        q, k, v = self.attn.Wqkv(self.attn_norm(x)).view(tokens, 3, self.num_heads, self.head_dim).unbind(1)
        attended = self.attention.forward(rotate(q, cos, sin), rotate(k, cos, sin), v, attn_metadata,
                                          window=self.window)
        x = self.attn.Wo(attended.reshape(tokens, -1), residual=x)
        up, gate = self.mlp.Wi(self.mlp_norm(x)).split(self.intermediate, dim=-1)
        return self.mlp.Wo(self.act(up) * gate, residual=x)


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """RoPE (rotate-half layout) on ``x [T, heads, D]``, computed in float32 as HF's ModernBERT does."""
    return rotate_half(x.float(), cos.float(), sin.float()).to(x.dtype)


class ModernBertEncoder(nn.Module):
    """``ModernBertModel``: packed tokens in, final-norm hidden states ``[T, H]`` out."""

    takes_padding_rows = True  # the core's CPU row padding (ModelInput.padding), dropped by the trunk's forward

    def __init__(self, config, attention, settings=None) -> None:
        super().__init__()
        if config.hidden_size % config.num_attention_heads:
            raise ValueError(f"ModernBERT: hidden_size {config.hidden_size} is not a multiple of "
                             f"num_attention_heads {config.num_attention_heads}")
        max_len = getattr(settings, "max_model_len", None) or config.max_position_embeddings
        kinds = layer_types(config)
        self.embeddings = nn.Module()
        self.embeddings.tok_embeddings = nn.Embedding(config.vocab_size, config.hidden_size)
        self.embeddings.norm = layer_norm(config)
        self.layers = nn.ModuleList(ModernBertLayer(config, attention, i, kind) for i, kind in enumerate(kinds))
        self.final_norm = layer_norm(config)
        self.rotary = nn.ModuleDict({kind: RotaryTables(rope_config(config, kind), max_len) for kind in set(kinds)})

    def forward(self, model_input) -> torch.Tensor:
        """Last hidden states of every packed token; positions restart at 0 in each sequence."""
        x = self.embeddings.norm(self.embeddings.tok_embeddings(model_input.input_ids))
        tables = {kind: rotary(model_input.positions) for kind, rotary in self.rotary.items()}
        for layer in self.layers:
            x = layer(x, *tables[layer.kind], model_input.attn_metadata)
        return self.final_norm(model_input.drop_padding(x))

    def after_load_weights(self) -> None:
        """Compute the RoPE tables (buffers come out of meta construction empty)."""
        for rotary in self.rotary.values():
            rotary.compute()

    def map_checkpoint_name(self, name: str):
        """Checkpoint names are ours (after ``model.``); the MLM and classification heads are skipped."""
        name = name.removeprefix("model.")
        return None if name.startswith(_HEADS) or name.endswith("inv_freq") else (name, None)


class ModernBertCrossEncoder(ModernBertEncoder):
    """``ModernBertForSequenceClassification``: pooled (CLS or mean, ``classifier_pooling``) -> dense, activation,
    LayerNorm (HF's ``ModernBertPredictionHead``, here ``prediction``) -> classifier."""

    takes_padding_rows = True  # the core's CPU row padding (ModelInput.padding), dropped by the trunk's forward

    def __init__(self, config, attention, settings=None) -> None:
        super().__init__(config, attention, settings)
        self.prediction = nn.Module()
        self.prediction.dense = Linear(config.hidden_size, config.hidden_size, bias=config.classifier_bias,
                                       activation=config.classifier_activation)
        self.prediction.norm = layer_norm(config)
        self.classifier = Linear(config.hidden_size, config.num_labels)

    def map_checkpoint_name(self, name: str):
        """The head's ``head.*`` is ``prediction.*`` here (``head`` is the pooler's method); MLM decoders skipped."""
        if name.startswith(("head.", "classifier.")):
            return name.replace("head.", "prediction.", 1), None
        return super().map_checkpoint_name(name)

    def head(self, pooled: torch.Tensor) -> torch.Tensor:
        """Logits ``[B, num_labels]`` from the pooled states (mean pooling gives float32: cast to the weights')."""
        pooled = pooled.to(self.classifier.weight.dtype)
        return self.classifier(self.prediction.norm(self.prediction.dense(pooled)))


class ModernBertTokenClassifier(ModernBertCrossEncoder):
    """``ModernBertForTokenClassification``: every token through the prediction head (dense, activation, LayerNorm)
    and ``classifier``; its forward returns the logits ``[T, num_labels]`` as the token states (the core's
    token_classify task reads them as such)."""

    takes_padding_rows = True  # the core's CPU row padding (ModelInput.padding), dropped by the trunk's forward

    def forward(self, model_input) -> torch.Tensor:
        """Per-token logits ``[T, num_labels]``."""
        return self.head(super().forward(model_input))
