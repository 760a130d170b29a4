"""Output processors (host side): relevance scores (rerank) and per-label probabilities (classify).

The worker's pooler has already applied the head and the activation (``settings.activation``):
each batch arrives as ``{"logits": [B, num_labels], "scores": activation(logits)}``.
"""

from __future__ import annotations

import torch

from wde_core.plugin_api import Request


def _rows(pooled: dict[str, torch.Tensor], requests: list[Request]) -> list[torch.Tensor]:
    return [pooled["logits" if r.options.raw_scores else "scores"][i] for i, r in enumerate(requests)]


class ScoreOutputProcessor:
    """One float per pair: the activation (sigmoid by default) of the single logit, or the raw logit."""

    def __init__(self, pipeline) -> None:
        pass

    def process(self, requests: list[Request], pooled: dict[str, torch.Tensor]) -> list[float]:
        """Scores in batch order."""
        return [float(row[0]) for row in _rows(pooled, requests)]


class LabelOutputProcessor:
    """``{label: probability}`` per input (softmax, or sigmoid for multi-label models), or raw logits."""

    def __init__(self, pipeline) -> None:
        config = pipeline.model.config
        self.labels = [str(config.id2label.get(i, f"LABEL_{i}")) for i in range(config.num_labels)]

    def process(self, requests: list[Request], pooled: dict[str, torch.Tensor]) -> list[dict[str, float]]:
        """Label -> probability (or logit) dicts in batch order, labels in id order."""
        return [dict(zip(self.labels, row.tolist())) for row in _rows(pooled, requests)]
