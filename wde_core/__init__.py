"""wde: the Workflow Defined Engine for prefill-only transformer models. ``from wde_core import Engine``;
plugins use :mod:`wde_core.plugins.hookspecs` and :mod:`wde_core.plugin_api`. Names resolve lazily (no torch on import)."""

from __future__ import annotations

from wde_core.plugins.lazy import lazy_exports

__version__ = "0.1.0"
_MODULES = {"wde_core.plugins.entries": ("ArchitectureLink", "Task", "Workflow"), "wde_core.runtime.engine": ("Engine",),
            "wde_core.runtime.async_engine": ("AsyncEngine",), "wde_core.assembly.engine_args": ("EngineArgs",),
            "wde_core.assembly.pipeline": ("NoWorkflowError", "Pipeline", "assemble_pipeline"),
            "wde_core.plugins.host": ("get_plugin_host",), "wde_core.plugins.hookspecs": ("hookimpl",)}
__all__, __getattr__, __dir__ = lazy_exports(globals(), _MODULES)
