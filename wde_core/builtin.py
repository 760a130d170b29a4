"""The core's own plugin, registered through the same hooks as any other: default stage components, the
tasks, the embed workflow and attention-backend selection. It names no model (its commands are defined on the
``wde`` group in ``wde_core.cli.main``)."""

from __future__ import annotations

from wde_core.plugins.entries import Task, Workflow
from wde_core.plugins.hookspecs import hookimpl

_S = "wde_core.stages"


@hookimpl
def wde_register_input_processors(register):
    """The text input processor of the embed task."""
    register("text", f"{_S}.input_processor:TextInputProcessor", "str or list of str, prompts applied")


@hookimpl
def wde_register_tokenizers(register):
    """The model directory's fast HF tokenizer."""
    register("hf-fast", f"{_S}.tokenizer:HFTokenizer", "the model directory's fast tokenizer")


@hookimpl
def wde_register_schedulers(register):
    """The token-budget scheduler."""
    register("token-budget", f"{_S}.scheduler:TokenBudgetScheduler", "FCFS under a token and sequence budget")


@hookimpl
def wde_register_model_input_builders(register):
    """The flat, padding-free batch builder."""
    register("flat", f"{_S}.model_input:FlatBatchBuilder", "packed, padding-free batch with cu_seqlens")


@hookimpl
def wde_register_attention_backends(register):
    """torch SDPA, eager (the reference) and flash-attn (``cpu_varlen`` comes from wde-cpu-kernels)."""
    register("torch_sdpa", "wde_core.attention.sdpa:SdpaAttention", "torch SDPA, CPU and GPU")
    register("eager", "wde_core.attention.eager:EagerAttention", "matmul + softmax, the reference")
    register("flash_attn", "wde_core.attention.flash:FlashAttention", "flash_attn_varlen_func, CUDA only")
    register("torch_varlen", "wde_core.attention.varlen:TorchVarlenAttention", "torch's varlen_attn, CUDA only")


@hookimpl
def wde_register_executors(register):
    """Synchronous and pipelined executors (``data_parallel`` comes from wde-data-parallel)."""
    register("sync", f"{_S}.executor:SyncExecutor", "runs each batch on the calling thread")
    register("pipelined", f"{_S}.executor:PipelinedExecutor", "a worker thread, 2 batches in flight")


@hookimpl
def wde_register_workers(register):
    """The model worker."""
    register("model", f"{_S}.worker:ModelWorker", "one model replica on one device")


@hookimpl
def wde_register_output_processors(register):
    """The embedding output processor (dimensions, normalization; pooling runs in the worker)."""
    register("embedding", f"{_S}.output:EmbeddingOutputProcessor", "dimensions and L2 normalization; token vectors")


@hookimpl
def wde_register_engine_args(register):
    """The base engine arguments."""
    register("default", "wde_core.assembly.engine_args:EngineArgs", "the arguments every workflow accepts")


# The core's embed workflow. A plugin whose workflow differs in a stage or two derives it:
# dataclasses.replace(EMBED_WORKFLOW, name="bge-m3", output_processor="bge-m3", description=...).
EMBED_WORKFLOW = Workflow(name="embed", input_processor="text", tokenizer="hf-fast", scheduler="token-budget",
                          model_input_builder="flat", executor="sync", worker="model", output_processor="embedding",
                          engine_args="default", description="texts -> pooled, optionally normalized embeddings")


_T = "wde_core.tasks"
TASKS = (
    Task("embed", {"encode": f"{_T}.embed:encode"}, inputs="a str or a list of str",
         description="pooled (and named) embeddings of texts"),
    Task("token_embed", {"embed_tokens": f"{_T}.embed:embed_tokens"}, inputs="a str or a list of str",
         description="every token's last hidden state", served_by=("embed",)),
    Task("rerank", {"score": f"{_T}.scoring:score", "rerank": f"{_T}.scoring:rerank"},
         inputs="(query, document) pairs, or a query and a list of documents",
         description="relevance scores of query-document pairs"),
    Task("classify", {"classify": f"{_T}.scoring:classify"}, inputs="a str, a (text, text) pair, or a list of them",
         description="per-label probabilities"),
    Task("token_classify", {"classify_tokens": f"{_T}.token_classify:classify_tokens"}, inputs="a str or a list of "
         "str", description="per-token labels with character offsets; entities grouped as transformers' pipeline"),
)


@hookimpl
def wde_register_tasks(register):
    """The core's tasks: embed (encode), token_embed (embed_tokens), rerank (score, rerank), classify,
    token_classify (classify_tokens)."""
    for task in TASKS:
        register(task)


@hookimpl
def wde_register_workflows(register):
    """The embed workflow."""
    register(EMBED_WORKFLOW)


@hookimpl(trylast=True)
def wde_select_attention_backend(device, dtype, causal):
    """flash_attn on CUDA in half precision when installed; else torch_varlen there for bidirectional models (causal
    ones keep torch_sdpa, whose padded path holds shared prefixes); else torch_sdpa (on CPU, wde-cpu-kernels answers
    first where it is installed)."""
    import torch

    if device.type == "cuda" and dtype in (torch.float16, torch.bfloat16):
        from wde_core.attention.flash import flash_attn_available
        from wde_core.attention.varlen import torch_varlen_available

        if flash_attn_available():
            return "flash_attn", "auto: CUDA, half precision and flash-attn installed"
        if not causal and torch_varlen_available(device, dtype):
            return "torch_varlen", "auto: CUDA, half precision, torch's varlen_attn (flash-attn is not installed)"
        return "torch_sdpa", "auto: flash-attn is not installed"
    return "torch_sdpa", f"auto: torch_sdpa on {device.type} with {str(dtype).replace('torch.', '')}"
