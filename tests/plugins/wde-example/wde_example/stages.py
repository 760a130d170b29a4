"""The example plugin's stage components, each a small subclass of a core component."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from wde_core.plugin_api import EngineArgs, Request, TextInputProcessor, TokenBudgetScheduler


@dataclass
class ExampleEngineArgs(EngineArgs):
    """The core's engine arguments plus ``lowercase`` (lower-case the texts, on by default)."""

    lowercase: bool = True


class LowercaseTextInputProcessor(TextInputProcessor):
    """The core's text input processor, then every text (prompt included) lower-cased."""

    def __init__(self, pipeline) -> None:
        super().__init__(pipeline)
        self.lowercase = bool(getattr(pipeline.args, "lowercase", True))

    def process(self, inputs, **kwargs) -> list[Request]:
        """Validate as the core does, then lower-case each request's text."""
        requests = super().process(inputs, **kwargs)
        if self.lowercase:
            for request in requests:
                request.text = request.text.lower()
        return requests


class ShortestFirstScheduler(TokenBudgetScheduler):
    """The core's token-budget batching (and fairness between calls), but a call's shortest requests go first."""

    def add(self, requests: Iterable[Request]) -> None:
        """Queue ``requests`` (checked as the core does) shortest first."""
        for request in sorted(requests, key=lambda r: (r.num_tokens, r.index)):
            super().add([request])
