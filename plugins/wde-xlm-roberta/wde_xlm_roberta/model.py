"""The XLM-RoBERTa encoder: BERT's layers, RoBERTa's checkpoint names and position offset; its token classifier
and its sequence-classification head (bge-reranker cross-encoders)."""

from __future__ import annotations

import torch
from torch import nn

from wde_bert.public import BertEncoder
from wde_core.plugin_api import Linear
from wde_xlm_roberta.plugin import PADDING_IDX


class XLMRobertaEncoder(BertEncoder):
    """``XLMRobertaModel`` without its pooler: the BERT layers under RoBERTa's names.

    Positions count from ``padding_idx + 1`` within each packed sequence (the core adds the link's
    ``position_offset``); there is one token type.
    """

    takes_padding_rows = True  # the core's CPU row padding (ModelInput.padding), dropped by the trunk's forward

    checkpoint_prefix = "roberta."
    skipped_prefixes = BertEncoder.skipped_prefixes + ("lm_head.", "embeddings.token_type_ids", "classifier.")

    def __init__(self, config, attention, settings=None) -> None:
        if config.pad_token_id != PADDING_IDX:
            raise ValueError(f"{type(self).__name__}: pad_token_id={config.pad_token_id} is not supported "
                             f"(XLM-R positions start at padding_idx + 1 = {PADDING_IDX + 1})")
        super().__init__(config, attention, settings)


class XLMRobertaTokenClassifier(XLMRobertaEncoder):
    """``XLMRobertaForTokenClassification`` (and RoBERTa's): the encoder, then ``classifier`` on every token; its
    forward returns the logits ``[T, num_labels]`` as the token states (the core's token_classify task reads them)."""

    takes_padding_rows = True  # the core's CPU row padding (ModelInput.padding), dropped by the trunk's forward

    skipped_prefixes = tuple(p for p in XLMRobertaEncoder.skipped_prefixes if p != "classifier.")

    def __init__(self, config, attention, settings=None) -> None:
        super().__init__(config, attention, settings)
        self.classifier = Linear(config.hidden_size, config.num_labels)

    def forward(self, model_input) -> torch.Tensor:
        """Per-token logits ``[T, num_labels]``."""
        return self.classifier(super().forward(model_input))


class XLMRobertaCrossEncoder(XLMRobertaEncoder):
    """``XLMRobertaForSequenceClassification``: CLS -> classifier.dense, tanh -> classifier.out_proj."""

    takes_padding_rows = True  # the core's CPU row padding (ModelInput.padding), dropped by the trunk's forward

    skipped_prefixes = ("lm_head.", "embeddings.token_type_ids", "embeddings.position_ids", "pooler.")

    def __init__(self, config, attention, settings=None) -> None:
        super().__init__(config, attention, settings)
        self.classifier = nn.Module()
        self.classifier.dense = Linear(config.hidden_size, config.hidden_size)
        self.classifier.out_proj = Linear(config.hidden_size, config.num_labels)

    def head(self, pooled: torch.Tensor) -> torch.Tensor:
        """Logits ``[B, num_labels]`` from the pooled (CLS) states."""
        return self.classifier.out_proj(torch.tanh(self.classifier.dense(pooled)))
