"""Everything a wde plugin may use, in one module: plugins import from here and nothing else of ``wde_core``.

Names resolve lazily (module ``__getattr__``), so ``from wde_core.plugin_api import hookimpl,
ArchitectureLink`` in a plugin's hook module imports neither torch nor transformers: plugin loading
stays cheap. Names of torch-based classes (``Linear``, ``ModelInput``, ...) import torch on first use.

Registration: ``hookimpl``, ``Workflow``, ``ArchitectureLink``, ``Task``, ``EMBED_WORKFLOW`` (derive
with ``dataclasses.replace``), ``LINK_DEFAULT_KEYS``. Stage bases to derive from: ``EngineArgs``,
``TextInputProcessor``, ``HFTokenizer`` (override ``tokenize`` or ``chunk``), ``TokenBudgetScheduler``,
``FlatBatchBuilder``, ``SyncExecutor``, ``ModelWorker``, ``EmbeddingOutputProcessor``. Data: ``Request``,
``EmbedOptions``, ``TokenEmbedOptions``, ``ScoreOptions``, ``ModelInput``, ``ModelSettings``,
``AttentionMetadata``, ``Call`` (what a task's prepare function returns). Model building blocks:
``Linear``, ``expand_kv_heads``, ``POOLERS`` / ``pool_cls`` / ``pool_mean`` / ``pool_last`` /
``pool_max``, ``finish_vectors``, ``split_tokens``, ``WeightsError``. Command line: ``read_inputs``,
``parse_engine_args``, ``emit_json``, and ``Engine`` / ``AsyncEngine`` / ``get_plugin_host`` for commands.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "hookimpl": "wde_core.hookspecs",
    "Workflow": "wde_core.entries",
    "ArchitectureLink": "wde_core.entries",
    "Task": "wde_core.entries",
    "LINK_DEFAULT_KEYS": "wde_core.entries",
    "EMBED_WORKFLOW": "wde_core.builtin",
    "EngineArgs": "wde_core.engine_args",
    "ModelSettings": "wde_core.settings",
    "Request": "wde_core.request",
    "EmbedOptions": "wde_core.request",
    "TokenEmbedOptions": "wde_core.request",
    "ScoreOptions": "wde_core.request",
    "Call": "wde_core.tasks",
    "TextInputProcessor": "wde_core.stages.input_processor",
    "HFTokenizer": "wde_core.stages.tokenizer",
    "TokenBudgetScheduler": "wde_core.stages.scheduler",
    "FlatBatchBuilder": "wde_core.stages.model_input",
    "ModelInput": "wde_core.stages.model_input",
    "SyncExecutor": "wde_core.stages.executor",
    "ModelWorker": "wde_core.stages.worker",
    "EmbeddingOutputProcessor": "wde_core.stages.output",
    "split_tokens": "wde_core.stages.output",
    "finish_vectors": "wde_core.outputs",
    "AttentionMetadata": "wde_core.attention.base",
    "expand_kv_heads": "wde_core.attention.base",
    "Linear": "wde_core.layers",
    "POOLERS": "wde_core.stages.pooling",
    "pool_cls": "wde_core.stages.pooling",
    "pool_mean": "wde_core.stages.pooling",
    "pool_last": "wde_core.stages.pooling",
    "pool_max": "wde_core.stages.pooling",
    "WeightsError": "wde_core.stages.weights",
    "read_inputs": "wde_core.cli_encode",
    "parse_engine_args": "wde_core.cli",
    "emit_json": "wde_core.cli",
    "Engine": "wde_core.engine",
    "AsyncEngine": "wde_core.async_engine",
    "get_plugin_host": "wde_core.plugins",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'wde_core.plugin_api' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
