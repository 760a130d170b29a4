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
``pool_max``, ``finish_vectors``, ``collect_embeddings``, ``split_tokens``, ``WeightsError``. Command line: ``read_inputs``,
``parse_engine_args``, ``emit_json``, and ``Engine`` / ``AsyncEngine`` / ``get_plugin_host`` for commands.
"""

from __future__ import annotations

from wde_core.lazy import lazy_exports

_MODULES = {
    "wde_core.hookspecs": ("hookimpl",),
    "wde_core.entries": ("Workflow", "ArchitectureLink", "Task", "LINK_DEFAULT_KEYS"),
    "wde_core.builtin": ("EMBED_WORKFLOW",),
    "wde_core.engine_args": ("EngineArgs",),
    "wde_core.settings": ("ModelSettings",),
    "wde_core.request": ("Request", "EmbedOptions", "TokenEmbedOptions", "ScoreOptions"),
    "wde_core.tasks": ("Call",),
    "wde_core.stages.input_processor": ("TextInputProcessor",),
    "wde_core.stages.tokenizer": ("HFTokenizer",),
    "wde_core.stages.scheduler": ("TokenBudgetScheduler",),
    "wde_core.stages.model_input": ("FlatBatchBuilder", "ModelInput"),
    "wde_core.stages.executor": ("SyncExecutor",),
    "wde_core.stages.worker": ("ModelWorker",),
    "wde_core.stages.output": ("EmbeddingOutputProcessor", "split_tokens"),
    "wde_core.outputs": ("finish_vectors", "collect_embeddings"),
    "wde_core.attention.base": ("AttentionMetadata", "expand_kv_heads"),
    "wde_core.layers": ("Linear",),
    "wde_core.stages.pooling": ("POOLERS", "pool_cls", "pool_mean", "pool_last", "pool_max"),
    "wde_core.stages.weights": ("WeightsError",),
    "wde_core.cli_encode": ("read_inputs",),
    "wde_core.cli": ("parse_engine_args", "emit_json"),
    "wde_core.engine": ("Engine",),
    "wde_core.async_engine": ("AsyncEngine",),
    "wde_core.plugins": ("get_plugin_host",),
}
__all__, __getattr__, __dir__ = lazy_exports(globals(), _MODULES)
