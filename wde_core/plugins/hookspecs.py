"""The wde hook specifications: the whole contract between the core and its plugins.

``wde_register_*(register)``: called once per plugin when plugins load; the plugin calls ``register(...)``
for each thing it provides, and the core validates each call and records which plugin gave what.
``wde_select_*`` / ``wde_get_*``: ``firstresult``, the first non-``None`` answer wins. ``wde_on_*``:
notifications. Hooks run while plugins load and while an engine is assembled, never per batch.
"""

from __future__ import annotations

import pluggy

PROJECT_NAME = "wde"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)

# --- engine stages: one registration hook per stage -------------------------------------------
# Every stage hook receives ``register(name, target, description="")`` where ``target`` is an
# import path ``"package.module:attribute"`` naming a class (or factory) for that stage.


@hookspec
def wde_register_input_processors(register):
    """Register input processors: turn user inputs (texts, pairs, ...) into validated requests."""


@hookspec
def wde_register_tokenizers(register):
    """Register tokenizers: turn requests into token ids, applying the truncation policy."""


@hookspec
def wde_register_schedulers(register):
    """Register schedulers: group waiting requests into batches under a token budget."""


@hookspec
def wde_register_model_input_builders(register):
    """Register model-input builders: turn a batch into flat, padding-free model tensors."""


@hookspec
def wde_register_attention_backends(register):
    """Register attention backends: varlen attention over packed sequences (causal or not)."""


@hookspec
def wde_register_executors(register):
    """Register executors: drive workers and return a future per submitted model input."""


@hookspec
def wde_register_workers(register):
    """Register workers: own the model on one device and run the forward pass and pooler."""


@hookspec
def wde_register_output_processors(register):
    """Register output processors: turn the worker's pooled outputs into user results (pooling runs in the worker)."""


@hookspec
def wde_register_engine_args(register):
    """Register engine-argument classes: dataclasses listing the arguments a workflow accepts."""


# --- tasks, workflows, architectures, model sources ------------------------------------------


@hookspec
def wde_register_tasks(register):
    """Register tasks with ``register(Task(...))``: each names its front-end methods' prepare functions."""

@hookspec
def wde_register_workflows(register):
    """Register workflows with ``register(workflow)``: a :class:`wde_core.Workflow` naming one component per stage."""


@hookspec
def wde_register_architectures(register):
    """Link HF architectures and tasks to workflows and model classes with ``register(ArchitectureLink(...))``."""


@hookspec
def wde_register_model_sources(register):
    """Register local copies of hub models with ``register(model_id, resolver)`` (``resolver``: the import path
    of a function returning the model directory, or ``None`` when it is not installed)."""


@hookspec(firstresult=True)
def wde_get_default_model():
    """Return the model id served when the user names no model, or ``None`` for no opinion."""


@hookspec(firstresult=True)
def wde_select_attention_backend(device, dtype, causal):
    """Return ``(backend_name, reason)`` for a ``torch.device``/``torch.dtype`` pair, or ``None``; asked only
    when no engine argument, environment variable or workflow names a backend."""


@hookspec(firstresult=True)
def wde_select_quantization(scheme, device, dtype):
    """Return ``(quantize, reason)`` for the ``quantization`` engine argument ``scheme`` (``"int8"``) on a
    ``torch.device``/``torch.dtype``, or ``None``: ``quantize`` is the import path of a function that converts a
    loaded model in place (after its weights and ``prepack()``); ``reason`` is what ``wde inspect`` shows."""


@hookspec(firstresult=True)
def wde_get_cpu_policy():
    """Return a :class:`wde_core.plugin_api.CpuPolicy` for this CPU (bf16 note, widened bf16 GEMMs, the dtypes
    oneDNN's linear runs), or ``None``; asked once per CPU pipeline, the default ``CpuPolicy()`` reads no CPU."""


# --- command line and notifications -----------------------------------------------------------


@hookspec
def wde_register_commands(cli):
    """Add commands to the ``wde`` command line: ``cli`` is the root :class:`click.Group`."""


@hookspec
def wde_on_pipeline_assembled(pipeline):
    """Notify that an engine assembled ``pipeline`` (a :class:`wde_core.Pipeline`), before any batch runs."""
