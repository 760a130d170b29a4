"""The hook implementations of the example plugin (entry point ``wde-example``)."""

from __future__ import annotations

import os

from wde_core.plugin_api import ArchitectureLink, Workflow, hookimpl

FORCE_EAGER_ENV = "WDE_EXAMPLE_FORCE_EAGER"
FORCE_EAGER_REASON = f"example plugin: {FORCE_EAGER_ENV} is set"
ARCHITECTURE = "ExampleBagOfEmbeddings"
WORKFLOW = "example-lowercase-embed"

# Every pipeline an engine assembled while this plugin was loaded, oldest first (tests read it).
SEEN_PIPELINES: list = []


@hookimpl
def wde_register_input_processors(register):
    register("lowercase-text", "wde_example.stages:LowercaseTextInputProcessor",
             "the core's text input processor, then lower-cased")


@hookimpl
def wde_register_schedulers(register):
    register("shortest-first", "wde_example.stages:ShortestFirstScheduler",
             "token-budget batches, shortest requests first")


@hookimpl
def wde_register_engine_args(register):
    register("example", "wde_example.stages:ExampleEngineArgs", "the core's arguments plus lowercase")


@hookimpl
def wde_register_workflows(register):
    register(Workflow(
        name=WORKFLOW,
        input_processor="lowercase-text",
        tokenizer="hf-fast",
        scheduler="shortest-first",
        model_input_builder="flat",
        executor="sync",
        worker="model",
        output_processor="embedding",
        engine_args="example",
        description="lower-cased texts -> mean-pooled, normalized embeddings",
    ))


@hookimpl
def wde_register_architectures(register):
    register(ArchitectureLink(
        architecture=ARCHITECTURE,
        task="embed",
        workflow=WORKFLOW,
        model="wde_example.model:BagOfEmbeddings",
        defaults={"pooling": "mean", "normalize": True},
        description="word embeddings + LayerNorm, no attention",
    ))


@hookimpl
def wde_select_attention_backend(device, dtype, causal):
    """``eager`` when ``WDE_EXAMPLE_FORCE_EAGER=1``; otherwise no opinion."""
    if os.environ.get(FORCE_EAGER_ENV) == "1":
        return "eager", FORCE_EAGER_REASON
    return None


@hookimpl
def wde_register_commands(cli):
    from wde_example.commands import example_hello

    cli.add_command(example_hello)


@hookimpl
def wde_on_pipeline_assembled(pipeline):
    SEEN_PIPELINES.append(pipeline)
