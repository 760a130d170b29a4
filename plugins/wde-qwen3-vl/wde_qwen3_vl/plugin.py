"""Registers Qwen3-VL single-vector embedders (``Qwen3VLForConditionalGeneration``, ``Qwen3VLModel``: the
Qwen3-VL-Embedding family) for the embed task, on a workflow of wde-qwen2-vl's text/image input processor and
tokenizer around this plugin's batches (the images' position-embedding taps) and model."""

from __future__ import annotations

from dataclasses import replace

from wde_core.plugin_api import EMBED_WORKFLOW, ArchitectureLink, hookimpl


@hookimpl
def wde_register_architectures(register):
    """Both Qwen3-VL architectures on the qwen3-vl-embed workflow."""
    for architecture in ("Qwen3VLForConditionalGeneration", "Qwen3VLModel"):
        register(ArchitectureLink(
            architecture=architecture, task="embed", workflow="qwen3-vl-embed",
            model="wde_qwen3_vl.model:Qwen3VLEmbedder", defaults={"max_model_len": 4096},
            configure="wde_qwen3_vl.settings:configure",
            description="Qwen3-VL embedder (Qwen3-VL-Embedding): texts, images and text + image inputs -> "
                        "last-token vectors",
        ))


@hookimpl
def wde_register_workflows(register):
    """The embed workflow with wde-qwen2-vl's text/image stages and Qwen3-VL's batches."""
    register(replace(EMBED_WORKFLOW, name="qwen3-vl-embed", input_processor="vision-text", tokenizer="qwen2-vl",
                     model_input_builder="qwen3-vl", engine_args="vision-text",
                     description="texts, images, text + image -> Qwen3-VL last-token embeddings (deepstack, "
                                 "interleaved M-RoPE)"))


@hookimpl
def wde_register_model_input_builders(register):
    """wde-qwen2-vl's text/image batch plus each patch's position-embedding taps."""
    register("qwen3-vl", "wde_qwen3_vl.stages:Qwen3VLBatchBuilder",
             "packed batch, images' patches, M-RoPE positions, learned-position taps")
