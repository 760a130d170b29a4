"""wde: the Workflow Defined Engine for prefill-only transformer models.

``from wde_core import Engine``; plugins extend it through the hooks in :mod:`wde_core.hookspecs` and
import what they use from :mod:`wde_core.plugin_api`. Names resolve lazily, so ``from wde_core import
hookimpl`` does not import torch.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"
_EXPORTS = {
    "ArchitectureLink": "wde_core.entries",
    "AsyncEngine": "wde_core.async_engine",
    "Engine": "wde_core.engine",
    "EngineArgs": "wde_core.engine_args",
    "NoWorkflowError": "wde_core.pipeline",
    "Pipeline": "wde_core.pipeline",
    "Task": "wde_core.entries",
    "Workflow": "wde_core.entries",
    "assemble_pipeline": "wde_core.pipeline",
    "get_plugin_host": "wde_core.plugins",
    "hookimpl": "wde_core.hookspecs",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'wde_core' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__ + ["__version__"]
