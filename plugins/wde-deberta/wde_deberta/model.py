"""DeBERTa-v2/v3 over packed sequences: embeddings, disentangled-attention layers, and the
``DebertaV2ForSequenceClassification`` head (ContextPooler: dense + activation on the first token, classifier).

The relative-position projections of every layer (``key_proj``/``query_proj`` of the normalized relative
embeddings, or ``pos_key_proj``/``pos_query_proj``) depend on the weights only, so they are computed once
in ``after_load_weights`` and pre-scaled, rather than in every forward as HF does.

The disentangled attention stays in the model (``relative.py``), not on the attention contract's position bias:
that bias (``BucketedBias``, ``AlibiBias``) is a per-head function of the key - query offset alone, while DeBERTa's
content-to-position and position-to-content terms are dot products of each query (each key) with the projected
embedding of the offset's bucket, a different value for every (token, offset) pair; the contract would have to take
those projections and compute the products inside every backend. ``wde inspect``'s ``attention`` note says the
engine's backend is not used for such configs.
"""

from __future__ import annotations

import itertools
import math
import re

import torch
import torch.nn.functional as F
from torch import nn

from wde_core.plugin_api import Linear
from wde_deberta.layout import Block
from wde_deberta.relative import RelativeSpec, disentangled_attention, plan

_LAYER = re.compile(r"^encoder\.layer\.(\d+)\.(.+)\.(weight|bias)$")
# HF per-layer module -> (our module, index of the stacked QKV slice or None)
_LAYER_NAMES = {
    "attention.self.query_proj": ("qkv", 0),
    "attention.self.key_proj": ("qkv", 1),
    "attention.self.value_proj": ("qkv", 2),
    "attention.self.pos_key_proj": ("pos_key_proj", None),
    "attention.self.pos_query_proj": ("pos_query_proj", None),
    "attention.output.dense": ("attn_out", None),
    "attention.output.LayerNorm": ("attn_norm", None),
    "intermediate.dense": ("ffn_in", None),
    "output.dense": ("ffn_out", None),
    "output.LayerNorm": ("ffn_norm", None),
}


def check_config(config) -> None:
    """Refuse what this encoder does not implement (the convolution of DeBERTa-v2 xlarge/xxlarge)."""
    if getattr(config, "conv_kernel_size", 0) > 0:
        raise ValueError("DeBERTa-v2 with a convolution layer (conv_kernel_size > 0, the v2 xlarge/xxlarge "
                         "models) is not supported; DeBERTa-v3 models have none")


def uses_relative_attention(config) -> bool:
    """Whether the layers add relative-position terms (HF: ``relative_attention`` and a ``pos_att_type``)."""
    return bool(getattr(config, "relative_attention", False)) and bool(getattr(config, "pos_att_type", None))


class DebertaEmbeddings(nn.Module):
    """Word (+ absolute position when ``position_biased_input``) (+ token type) embeddings, projection, LayerNorm."""

    def __init__(self, config) -> None:
        super().__init__()
        size = getattr(config, "embedding_size", None) or config.hidden_size
        self.word_embeddings = nn.Embedding(config.vocab_size, size)
        self.position_biased = getattr(config, "position_biased_input", True)
        if self.position_biased:
            self.position_embeddings = nn.Embedding(config.max_position_embeddings, size)
        if config.type_vocab_size > 0:
            self.token_type_embeddings = nn.Embedding(config.type_vocab_size, size)
        self.embed_proj = nn.Linear(size, config.hidden_size, bias=False) if size != config.hidden_size else None
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(self, input_ids, positions, token_type_ids) -> torch.Tensor:
        """Embed packed tokens ``[T]`` into ``[T, H]``."""
        x = self.word_embeddings(input_ids)
        if self.position_biased:
            x = x + self.position_embeddings(positions)
        if hasattr(self, "token_type_embeddings"):
            types = self.token_type_embeddings
            x = x + (types.weight[0] if token_type_ids is None else types(token_type_ids))
        if self.embed_proj is not None:
            x = self.embed_proj(x)
        return self.LayerNorm(x)


class DebertaLayer(nn.Module):
    """Post-norm layer: fused QKV, disentangled attention, GELU feed-forward."""

    def __init__(self, config, attention, spec: RelativeSpec | None) -> None:
        super().__init__()
        hidden, self.heads = config.hidden_size, config.num_attention_heads
        self.head_dim = getattr(config, "attention_head_size", None) or hidden // self.heads
        inner = self.heads * self.head_dim
        kinds = set(getattr(config, "pos_att_type", None) or ())
        self.scale = 1.0 / math.sqrt(self.head_dim * (1 + len(kinds & {"c2p", "p2c"})))
        self.attention, self.spec = attention, spec
        self.share_att_key = getattr(config, "share_att_key", False)
        self.qkv = Linear(hidden, 3 * inner)
        if spec is not None and not self.share_att_key:
            self.pos_key_proj = nn.Linear(hidden, inner) if spec.c2p else None
            self.pos_query_proj = nn.Linear(hidden, inner) if spec.p2c else None
        self.attn_out = Linear(inner, hidden)
        self.attn_norm = nn.LayerNorm(hidden, eps=config.layer_norm_eps)
        self.ffn_in = Linear(hidden, config.intermediate_size, activation=config.hidden_act)
        self.ffn_out = Linear(config.intermediate_size, hidden)
        self.ffn_norm = nn.LayerNorm(hidden, eps=config.layer_norm_eps)
        self.pos_key = self.pos_query = None  # [heads, 2 * span, head_dim], set by project_positions

    def project_positions(self, rel: torch.Tensor) -> None:
        """Project the (normalized) relative embeddings for c2p (keys) and p2c (queries), pre-scaled."""
        inner = self.heads * self.head_dim

        def project(module, part):
            if self.share_att_key:
                rows = slice(part * inner, (part + 1) * inner)
                out = F.linear(rel, self.qkv.weight[rows], self.qkv.bias[rows])
            else:
                out = module(rel)
            return (out * self.scale).view(rel.shape[0], self.heads, self.head_dim).transpose(0, 1).contiguous()

        self.pos_key = project(getattr(self, "pos_key_proj", None), 1) if self.spec.c2p else None
        self.pos_query = project(getattr(self, "pos_query_proj", None), 0) if self.spec.p2c else None

    def forward(self, x: torch.Tensor, attn_metadata, blocks: list[Block] | None) -> torch.Tensor:
        """One layer over the packed tokens ``x [T, H]``."""
        tokens, qkv = x.shape[0], self.qkv(x)
        if blocks is None:  # no relative terms: the engine's attention backend
            q, k, v = qkv.view(tokens, 3, self.heads, self.head_dim).unbind(1)
            attended = self.attention.forward(q, k, v, attn_metadata, scale=self.scale).reshape(tokens, -1)
        else:
            attended = disentangled_attention(qkv, self.heads, self.pos_key, self.pos_query, blocks, self.scale)
        x = self.attn_norm(self.attn_out(attended, residual=x))
        return self.ffn_norm(self.ffn_out(self.ffn_in(x), residual=x))


class DebertaV2Encoder(nn.Module):
    """``DebertaV2Model``: packed tokens in, last hidden states ``[T, H]`` out."""

    takes_padding_rows = True  # the core's CPU row padding (ModelInput.padding), dropped by the trunk's forward

    checkpoint_prefix = "deberta."
    skipped_prefixes = ("embeddings.position_ids", "lm_predictions.", "mask_predictions.", "cls.")

    def __init__(self, config, attention, settings=None) -> None:
        super().__init__()
        check_config(config)
        self.hidden_size = config.hidden_size
        self.inner_size = config.num_attention_heads * (
            getattr(config, "attention_head_size", None) or config.hidden_size // config.num_attention_heads)
        self.spec = RelativeSpec.from_config(config) if uses_relative_attention(config) else None
        self.embeddings = DebertaEmbeddings(config)
        if self.spec is not None:
            self.rel_embeddings = nn.Embedding(2 * self.spec.span, config.hidden_size)
            norm = [x.strip() for x in str(getattr(config, "norm_rel_ebd", "none")).lower().split("|")]
            self.rel_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps) if "layer_norm" in norm else None
        self.layers = nn.ModuleList(DebertaLayer(config, attention, self.spec) for _ in range(config.num_hidden_layers))

    def after_load_weights(self) -> None:
        """Project the relative embeddings for every layer, once (they depend on the weights only)."""
        if self.spec is None:
            return
        with torch.no_grad():
            rel = self.rel_embeddings.weight
            if self.rel_norm is not None:
                rel = self.rel_norm(rel)
            for layer in self.layers:
                layer.project_positions(rel)

    def forward(self, model_input) -> torch.Tensor:
        """Last hidden states ``[T, H]`` of every packed token."""
        x = self.embeddings(model_input.input_ids, model_input.positions, model_input.token_type_ids)
        meta = model_input.attn_metadata
        blocks = None
        if self.spec is not None:
            starts = [0, *itertools.accumulate(meta.seq_lens)][:-1]
            blocks = plan(meta.seq_lens, starts, self.spec, x.device)
        for layer in self.layers:
            x = layer(x, meta, blocks)
        return model_input.drop_padding(x)

    def map_checkpoint_name(self, name: str):
        """Map an HF checkpoint name to ``(parameter, rows)``; ``None`` for weights not used."""
        name = name.removeprefix(self.checkpoint_prefix)
        if name.startswith(self.skipped_prefixes) or self.skips_position_embeddings(name):
            return None
        if name.startswith(("encoder.rel_embeddings.", "encoder.LayerNorm.")):
            if self.spec is None:  # relative_attention without a pos_att_type: the table is never used
                return None
            return name.replace("encoder.LayerNorm.", "rel_norm.").removeprefix("encoder."), None
        match = _LAYER.match(name)
        if match is None:
            return name, None
        index, module, kind = match.groups()
        ours, part = _LAYER_NAMES.get(module, (module, None))
        rows = None if part is None else slice(part * self.inner_size, (part + 1) * self.inner_size)
        return f"layers.{index}.{ours}.{kind}", rows

    def skips_position_embeddings(self, name: str) -> bool:
        """Absolute position embeddings a relative-only checkpoint may still carry (HF ignores them too)."""
        return name.startswith("embeddings.position_embeddings.") and not self.embeddings.position_biased


class DebertaV2CrossEncoder(DebertaV2Encoder):
    """``DebertaV2ForSequenceClassification``: first token -> pooler (dense, ``pooler_hidden_act``) -> classifier."""

    takes_padding_rows = True  # the core's CPU row padding (ModelInput.padding), dropped by the trunk's forward

    def __init__(self, config, attention, settings=None) -> None:
        super().__init__(config, attention, settings)
        size = getattr(config, "pooler_hidden_size", config.hidden_size)
        if size != config.hidden_size:
            raise ValueError(f"pooler_hidden_size {size} != hidden_size {config.hidden_size} is not supported")
        self.pooler = nn.Module()
        self.pooler.dense = Linear(size, size, activation=getattr(config, "pooler_hidden_act", "gelu"))
        self.classifier = Linear(config.hidden_size, config.num_labels)

    def map_checkpoint_name(self, name: str):
        """The head's names (``pooler.dense``, ``classifier``) sit outside the ``deberta.`` prefix."""
        if name.startswith(("pooler.", "classifier.")):
            return name, None
        return super().map_checkpoint_name(name)

    def head(self, pooled: torch.Tensor) -> torch.Tensor:
        """Logits ``[B, num_labels]`` from the pooled (first-token) states."""
        return self.classifier(self.pooler.dense(pooled))


class DebertaV2TokenClassifier(DebertaV2Encoder):
    """``DebertaV2ForTokenClassification``: the encoder, then ``classifier`` on every token; its forward returns
    the logits ``[T, num_labels]`` as the token states (the core's token_classify task reads them as such)."""

    takes_padding_rows = True  # the core's CPU row padding (ModelInput.padding), dropped by the trunk's forward

    def __init__(self, config, attention, settings=None) -> None:
        super().__init__(config, attention, settings)
        self.classifier = Linear(config.hidden_size, config.num_labels)

    def forward(self, model_input) -> torch.Tensor:
        """Per-token logits ``[T, num_labels]``."""
        return self.classifier(super().forward(model_input))

    def map_checkpoint_name(self, name: str):
        """The ``classifier`` sits outside the ``deberta.`` prefix."""
        return (name, None) if name.startswith("classifier.") else super().map_checkpoint_name(name)
