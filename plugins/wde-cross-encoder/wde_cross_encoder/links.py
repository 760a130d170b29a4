"""The two architecture links of a sequence-classification head: one label reranks, several labels classify."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from wde_core.plugin_api import ArchitectureLink

_PUBLIC = "wde_cross_encoder.public"
CHOOSE_ACTIVATION = f"{_PUBLIC}:choose_activation"
VARIANTS = (  # task (and workflow), variant, matcher
    ("rerank", "single-logit", f"{_PUBLIC}:has_one_label"),
    ("classify", "several-labels", f"{_PUBLIC}:has_several_labels"),
)


def cross_encoder_links(architecture: str, model: str, description: str, *,
                        defaults: Mapping[str, Any] | None = None,
                        configure: str = CHOOSE_ACTIVATION) -> list[ArchitectureLink]:
    """The ``single-logit`` (``num_labels == 1``, task and workflow ``rerank``) and ``several-labels``
    (``classify``) links of ``architecture``; ``description`` may name ``{task}`` and ``{variant}``; the
    defaults pool the first token without normalizing, updated by ``defaults``."""
    return [ArchitectureLink(
        architecture=architecture, task=task, workflow=task, model=model,
        defaults={"pooling": "cls", "normalize": False, **(defaults or {})}, variant=variant, matches=matches,
        configure=configure, description=description.format(task=task, variant=variant),
    ) for task, variant, matches in VARIANTS]
