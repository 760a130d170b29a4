"""Output processor of the embed task: pooling on the device, then dimensions and normalization."""

from __future__ import annotations

from typing import Callable

import numpy as np
import torch

from wde_core.request import Request
from wde_core.stages.pooling import POOLERS


class EmbeddingOutputProcessor:
    """Pools hidden states, truncates to ``dimensions`` (Matryoshka) and L2-normalizes."""

    outputs = ("dense",)

    def __init__(self, pipeline) -> None:
        self.pooling = pipeline.settings.pooling
        self.normalize = pipeline.settings.normalize

    def pooler(self) -> Callable:
        """The function the worker applies to ``(hidden_states, model_input)`` on the device."""
        return POOLERS[self.pooling]

    def process(self, requests: list[Request], pooled: torch.Tensor) -> list[np.ndarray]:
        """Return one float32 vector per request, in batch order."""
        pooled = pooled.float()
        results = []
        for request, vector in zip(requests, pooled):
            options = request.options
            if options.dimensions is not None:
                vector = vector[: options.dimensions]
            normalize = self.normalize if options.normalize is None else options.normalize
            if normalize:
                vector = torch.nn.functional.normalize(vector, dim=0)
            results.append(vector.numpy())
        return results
