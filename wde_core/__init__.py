"""wde: the Workflow Defined Engine for prefill-only transformer models.

``from wde_core import Engine``; plugins extend it through the hooks in :mod:`wde_core.hookspecs`.
"""

from wde_core.engine import Engine
from wde_core.engine_args import EngineArgs
from wde_core.hookspecs import hookimpl
from wde_core.pipeline import NoWorkflowError, Pipeline, assemble_pipeline
from wde_core.plugins import get_plugin_host
from wde_core.registry import ArchitectureLink, Workflow

__version__ = "0.1.0"
__all__ = [
    "ArchitectureLink",
    "Engine",
    "EngineArgs",
    "NoWorkflowError",
    "Pipeline",
    "Workflow",
    "assemble_pipeline",
    "get_plugin_host",
    "hookimpl",
]
