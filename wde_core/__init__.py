"""wde: the Workflow Defined Engine for prefill-only transformer models.

``from wde_core import Engine``; plugins extend it through the hooks in :mod:`wde_core.hookspecs` and
import what they use from :mod:`wde_core.plugin_api`. Names resolve lazily, so ``from wde_core import
hookimpl`` does not import torch.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"
_MODULES = {"wde_core.entries": ("ArchitectureLink", "Task", "Workflow"), "wde_core.engine": ("Engine",),
            "wde_core.async_engine": ("AsyncEngine",), "wde_core.engine_args": ("EngineArgs",),
            "wde_core.pipeline": ("NoWorkflowError", "Pipeline", "assemble_pipeline"),
            "wde_core.plugins": ("get_plugin_host",), "wde_core.hookspecs": ("hookimpl",)}
_EXPORTS = {name: module for module, names in _MODULES.items() for name in names}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'wde_core' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__ + ["__version__"]
