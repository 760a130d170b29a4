"""Output processors: relevance scores (rerank) and per-label probabilities (classify)."""

from __future__ import annotations

from collections.abc import Callable

import torch

from wde_core.request import Request

ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "sigmoid": torch.sigmoid,
    "identity": lambda logits: logits,
    "tanh": torch.tanh,
    "softmax": lambda logits: torch.softmax(logits, dim=-1),
}


def _logits(logits: torch.Tensor, model_input) -> torch.Tensor:
    return logits  # the model already pooled: one row of logits per sequence


class ScoreOutputProcessor:
    """One float per pair: the activation (sigmoid by default) of the single logit, or the raw logit."""

    def __init__(self, pipeline) -> None:
        self.activation = ACTIVATIONS[pipeline.settings.defaults["activation"]]

    def pooler(self) -> Callable:
        """The model returns ``[B, 1]`` logits; nothing to pool."""
        return _logits

    def process(self, requests: list[Request], logits: torch.Tensor) -> list[float]:
        """Scores in batch order."""
        logits = logits.float()[:, 0]
        scored = self.activation(logits)
        return [float(logits[i] if r.options.raw_scores else scored[i]) for i, r in enumerate(requests)]


class LabelOutputProcessor:
    """``{label: probability}`` per input (softmax, or sigmoid for multi-label models), or raw logits."""

    def __init__(self, pipeline) -> None:
        self.activation = ACTIVATIONS[pipeline.settings.defaults["activation"]]
        config = pipeline.model.config
        self.labels = [str(config.id2label.get(i, f"LABEL_{i}")) for i in range(config.num_labels)]

    def pooler(self) -> Callable:
        """The model returns ``[B, num_labels]`` logits; nothing to pool."""
        return _logits

    def process(self, requests: list[Request], logits: torch.Tensor) -> list[dict[str, float]]:
        """Label -> probability (or logit) dicts in batch order, labels in id order."""
        logits = logits.float()
        probabilities = self.activation(logits)
        results = []
        for i, request in enumerate(requests):
            row = logits[i] if request.options.raw_scores else probabilities[i]
            results.append(dict(zip(self.labels, row.tolist())))
        return results
