"""Engine arguments of the decoder-embedding workflow."""

from __future__ import annotations

from dataclasses import dataclass

from wde_core.plugin_api import EngineArgs


@dataclass
class DecoderEngineArgs(EngineArgs):
    """The core's arguments plus ``enable_bidirectional``.

    ``enable_bidirectional=True`` attends bidirectionally, ``False`` causally; ``None`` (the
    default) follows the model's config, then the known-model rules, then causal.
    """

    enable_bidirectional: bool | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.enable_bidirectional is not None and not isinstance(self.enable_bidirectional, bool):
            raise ValueError(f"engine argument enable_bidirectional={self.enable_bidirectional!r}: "
                             "expected True, False or None")
