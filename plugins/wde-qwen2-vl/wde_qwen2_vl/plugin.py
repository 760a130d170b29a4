"""Registers ColQwen2 and ColQwen2.5 (``ColQwen2ForRetrieval`` on a Qwen2-VL or Qwen2.5-VL backbone: its vision tower
and decoder, one normalized vector per token) and Qwen2-VL / Qwen2.5-VL single-vector embedders
(``Qwen2VLForConditionalGeneration``, ``Qwen2VLModel``, ``Qwen2_5_VLForConditionalGeneration``, ``Qwen2_5_VLModel``:
GME, DSE) for the embed task, their workflows and stages, and the late_interaction task."""

from __future__ import annotations

from dataclasses import replace

from wde_core.plugin_api import EMBED_WORKFLOW, ArchitectureLink, Task, hookimpl

_S = "wde_qwen2_vl.stages"
_VT = "wde_qwen2_vl.vision_text"


@hookimpl
def wde_register_tasks(register):
    """late_interaction: MaxSim scores and rankings of multi-vector models (served by embed-linked models)."""
    register(Task("late_interaction", {"multi_vector_scores": "wde_qwen2_vl.tasks:multi_vector_scores",
                                       "multi_vector_rerank": "wde_qwen2_vl.tasks:multi_vector_rerank"},
                  inputs="queries (str) and documents (page images or texts)", served_by=("embed",),
                  description="MaxSim scores between multi-vector queries and documents (ColQwen2, ColPali)"))


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
    """The embed workflow with query/page stages and the multi-vector output; with text/image stages (M-RoPE)."""
    register(replace(EMBED_WORKFLOW, name="colqwen2", input_processor="query-page", tokenizer="colqwen2",
                     model_input_builder="query-page", output_processor="multi-vector",
                     description="queries and page images -> [tokens, dim] per input (output='multi_vector')"))
    register(replace(EMBED_WORKFLOW, name="qwen2-vl-embed", input_processor="vision-text", tokenizer="qwen2-vl",
                     model_input_builder="vision-text", engine_args="vision-text",
                     description="texts, images, text + image -> Qwen2-VL / Qwen2.5-VL last-token embeddings "
                                 "(M-RoPE)"))


@hookimpl
def wde_register_engine_args(register):
    """The core's arguments plus the vision-language embedders' framing (plain or chat), instruction and chat
    suffix."""
    register("vision-text", "wde_qwen2_vl.framing:VisionTextEngineArgs",
             "the core's arguments plus framing ('plain' or 'chat'), instruction and chat_suffix")


@hookimpl
def wde_register_input_processors(register):
    """Queries (str) and pages (images) in one list."""
    register("query-page", f"{_S}:QueryPageInputProcessor", "str queries and page images, mixed")
    register("vision-text", f"{_VT}:VisionTextInputProcessor", "texts, images and {'text', 'image'} dicts, mixed")


@hookimpl
def wde_register_tokenizers(register):
    """The directory's ColQwen2Processor: query prefix and augmentation, the page's visual prompt and patches."""
    register("colqwen2", f"{_S}:QueryPageTokenizer", "ColQwen2Processor: queries and pages as it lays them out")
    register("qwen2-vl", f"{_VT}:VisionTextTokenizer",
             "Qwen2VLProcessor's layout (the image placeholder, then the text), or the model's chat template")


@hookimpl
def wde_register_model_input_builders(register):
    """The packed batch plus the pages' patches."""
    register("query-page", f"{_S}:QueryPageBatchBuilder", "packed batch with the pages' patches and grids")
    register("vision-text", f"{_VT}:VisionTextBatchBuilder", "packed batch, images' patches, M-RoPE positions")


@hookimpl
def wde_register_output_processors(register):
    """Every token's normalized vector."""
    register("multi-vector", f"{_S}:MultiVectorOutputProcessor", "[tokens, dim] per input (late interaction)")
