"""ELECTRA: BERT's layers behind embeddings of ``embedding_size`` (projected to ``hidden_size`` when they
differ); the sequence-classification head is dense -> GELU -> out_proj on the first token."""

from __future__ import annotations

import copy

import torch
from torch import nn

from wde_bert.public import BertEmbeddings, BertEncoder
from wde_core.plugin_api import Linear


class ElectraEncoder(BertEncoder):
    """``ElectraModel`` (the discriminator's encoder): packed tokens in, last hidden states ``[T, H]`` out."""

    takes_padding_rows = True  # the core's CPU row padding (ModelInput.padding), dropped by the trunk's forward

    checkpoint_prefix = "electra."
    skipped_prefixes = ("embeddings.position_ids", "embeddings.token_type_ids", "discriminator_predictions.",
                        "generator_predictions.", "generator_lm_head.", "classifier.")

    def __init__(self, config, attention, settings=None) -> None:
        super().__init__(config, attention, settings)
        embedding_config = copy.copy(config)
        embedding_config.hidden_size = config.embedding_size
        self.embeddings = BertEmbeddings(embedding_config)
        if config.embedding_size != config.hidden_size:
            self.embeddings_project = Linear(config.embedding_size, config.hidden_size)

    def forward(self, model_input) -> torch.Tensor:
        """Last hidden states ``[T, H]`` of every packed token."""
        x = self.embeddings(model_input.input_ids, model_input.positions, model_input.token_type_ids)
        if hasattr(self, "embeddings_project"):
            x = self.embeddings_project(x)
        for layer in self.layers:
            x = layer(x, model_input.attn_metadata)
        return model_input.drop_padding(x)


class ElectraCrossEncoder(ElectraEncoder):
    """``ElectraForSequenceClassification``: first token -> classifier.dense, GELU -> classifier.out_proj."""

    takes_padding_rows = True  # the core's CPU row padding (ModelInput.padding), dropped by the trunk's forward

    skipped_prefixes = tuple(p for p in ElectraEncoder.skipped_prefixes if p != "classifier.")

    def __init__(self, config, attention, settings=None) -> None:
        super().__init__(config, attention, settings)
        self.classifier = nn.Module()
        self.classifier.dense = Linear(config.hidden_size, config.hidden_size, activation="gelu")
        self.classifier.out_proj = Linear(config.hidden_size, config.num_labels)

    def head(self, pooled: torch.Tensor) -> torch.Tensor:
        """Logits ``[B, num_labels]`` from the pooled (first-token) states."""
        return self.classifier.out_proj(self.classifier.dense(pooled))
