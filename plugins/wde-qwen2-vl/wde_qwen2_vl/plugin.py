"""Registers ColQwen2 and ColQwen2.5 (``ColQwen2ForRetrieval`` on a Qwen2-VL or Qwen2.5-VL backbone: its vision tower
and decoder, one normalized vector per token) and Qwen2-VL / Qwen2.5-VL single-vector embedders
(``Qwen2VLForConditionalGeneration``, ``Qwen2VLModel``, ``Qwen2_5_VLForConditionalGeneration``, ``Qwen2_5_VLModel``:
GME, DSE) for the embed task, and their workflows: wde-vision-language's stages (query/page; text/image with M-RoPE)
and wde-late-interaction's multi-vector output, which its ``late_interaction`` task scores."""

from __future__ import annotations

from dataclasses import replace

from wde_core.plugin_api import EMBED_WORKFLOW, ArchitectureLink, hookimpl


@hookimpl
def wde_register_architectures(register):
    """``ColQwen2ForRetrieval`` (either backbone) on the colqwen2 workflow; Qwen2-VL's and Qwen2.5-VL's
    ``*ForConditionalGeneration`` and ``*Model`` (GME, DSE) as single-vector embedders on qwen2-vl-embed."""
    register(ArchitectureLink(
        architecture="ColQwen2ForRetrieval", task="embed", workflow="colqwen2", model="wde_qwen2_vl.model:ColQwen2",
        defaults={"pooling": "last", "normalize": False, "max_model_len": 4096},  # ColQwen2-v1.0's pages: ~790
        configure="wde_qwen2_vl.settings:configure",
        description="ColQwen2 / ColQwen2.5 (Qwen2-VL / Qwen2.5-VL backbone): text queries and page images -> one "
                    "vector per token (output='multi_vector')",
    ))
    for architecture in ("Qwen2VLForConditionalGeneration", "Qwen2VLModel", "Qwen2_5_VLForConditionalGeneration",
                         "Qwen2_5_VLModel"):
        register(ArchitectureLink(
            architecture=architecture, task="embed", workflow="qwen2-vl-embed",
            model="wde_qwen2_vl.embedder:Qwen2VLEmbedder", defaults={"max_model_len": 4096},
            configure="wde_qwen2_vl.settings:configure_embedder",
            description=f"{'Qwen2.5-VL' if '2_5' in architecture else 'Qwen2-VL'} embedder (GME, DSE): texts, images "
                        "and text + image inputs -> last-token vectors",
        ))


@hookimpl
def wde_register_workflows(register):
    """The embed workflow with wde-vision-language's query/page stages and wde-late-interaction's multi-vector output;
    with wde-vision-language's text/image stages (M-RoPE)."""
    register(replace(EMBED_WORKFLOW, name="colqwen2", input_processor="query-page", tokenizer="colqwen2",
                     model_input_builder="query-page", output_processor="multi-vector",
                     description="queries and page images -> [tokens, dim] per input (output='multi_vector')"))
    register(replace(EMBED_WORKFLOW, name="qwen2-vl-embed", input_processor="vision-text", tokenizer="qwen2-vl",
                     model_input_builder="vision-text", engine_args="vision-text",
                     description="texts, images, text + image -> Qwen2-VL / Qwen2.5-VL last-token embeddings "
                                 "(M-RoPE)"))
