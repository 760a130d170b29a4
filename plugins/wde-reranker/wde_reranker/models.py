"""The sequence-classification head on the BERT encoder (XLM-R's is in wde-xlm-roberta).

``forward`` returns every token's hidden state like any encoder; the worker's pooler pools them (CLS,
the link's default) and calls ``head(pooled) -> logits [B, num_labels]``, then the activation.
"""

from __future__ import annotations

import torch
from torch import nn

from wde_bert.public import BertEncoder
from wde_core.plugin_api import Linear


class BertCrossEncoder(BertEncoder):
    """``BertForSequenceClassification``: CLS -> pooler (dense, tanh) -> classifier."""

    takes_padding_rows = True  # the core's CPU row padding (ModelInput.padding), dropped by the trunk's forward

    skipped_prefixes = ("cls.", "embeddings.position_ids")

    def __init__(self, config, attention, settings=None) -> None:
        super().__init__(config, attention, settings)
        self.pooler = nn.Module()
        self.pooler.dense = Linear(config.hidden_size, config.hidden_size)
        self.classifier = Linear(config.hidden_size, config.num_labels)

    def head(self, pooled: torch.Tensor) -> torch.Tensor:
        """Logits ``[B, num_labels]`` from the pooled (CLS) states."""
        return self.classifier(torch.tanh(self.pooler.dense(pooled)))

