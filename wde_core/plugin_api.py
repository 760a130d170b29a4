"""Everything a wde plugin may use, in one module: plugins import from here and nothing else of ``wde_core``.

Names resolve lazily, so a plugin's hook module that imports ``hookimpl`` and the registration classes
imports neither torch nor transformers; torch-based names (``Linear``, ``ModelInput``, ...) import torch
on first use. The names, by module, are below; docs/plugin-guide.md says what each is for."""

from __future__ import annotations

from wde_core.plugins.lazy import lazy_exports

_MODULES = {
    # registration: the hook marker and what the hooks register
    "wde_core.plugins.hookspecs": ("hookimpl",),
    "wde_core.plugins.entries": ("Workflow", "ArchitectureLink", "Task", "LINK_DEFAULT_KEYS", "CpuPolicy"),
    "wde_core.builtin": ("EMBED_WORKFLOW",),
    "wde_core.assembly.engine_args": ("EngineArgs", "child_engine_args", "POOLINGS"),
    "wde_core.assembly.settings": ("ModelSettings", "Proposals", "Extras"),
    # requests, tasks and the stages' base classes
    "wde_core.stages.request": ("Request", "EmbedOptions", "TokenEmbedOptions", "ScoreOptions", "ImageInput",
                                "as_image_input", "InputError", "InputValueError", "InputTypeError"),
    "wde_core.tasks": ("Call", "TaskContext"),
    "wde_core.tasks.late_chunking": ("late_chunk_spans",),
    "wde_core.stages.input_processor": ("TextInputProcessor",),
    "wde_core.stages.tokenizer": ("HFTokenizer", "prompt_token_count"),
    "wde_core.stages.scheduler": ("TokenBudgetScheduler",),
    "wde_core.stages.model_input": ("FlatBatchBuilder", "ModelInput", "move_to"),
    "wde_core.stages.executor": ("SyncExecutor",),
    "wde_core.stages.worker": ("ModelWorker", "worker_factory"),
    "wde_core.stages.output": ("EmbeddingOutputProcessor", "split_tokens", "finish_vectors", "collect_embeddings"),
    "wde_core.stages.pooling": ("POOLERS", "pool_cls", "pool_mean", "pool_last", "pool_max"),
    "wde_core.stages.weights": ("WeightsError",),
    # model building blocks: attention contract, layers, RoPE, tensor parallelism
    "wde_core.attention.base": ("AttentionMetadata", "SharedKeys", "aligned_mask", "expand_kv_heads"),
    "wde_core.attention.sdpa": ("SdpaAttention", "SdpaMetadata"),
    "wde_core.attention.bias": ("PositionBias", "BucketedBias", "AlibiBias", "alibi_slopes", "offset_span"),
    "wde_core.modeling.layers": ("LayerNorm", "Linear", "RMSNorm"),
    "wde_core.modeling.rope": ("RotaryTables", "rotate", "rope_type", "rope_parameters", "head_dim"),
    "wde_core.modeling.parallel": ("ColumnParallelLinear", "RowParallelLinear", "VocabParallelEmbedding",
                                   "TensorParallel", "tensor_parallel", "set_tensor_parallel"),
    # engines, and what a plugin's command or executor builds them from (wde_register_commands, worker processes)
    "wde_core.runtime.engine": ("Engine",),
    "wde_core.runtime.async_engine": ("AsyncEngine",),
    "wde_core.assembly.pipeline": ("assemble_pipeline",),
    "wde_core.cli.main": ("parse_engine_args", "emit_json", "engine_arg_option", "engine_error"),
    "wde_core.plugins.host": ("get_plugin_host", "PluginHost", "reset_plugin_host"),
}
__all__, __getattr__, __dir__ = lazy_exports(globals(), _MODULES)
