"""Registers ColQwen2 (``ColQwen2ForRetrieval``: Qwen2-VL's vision tower and decoder, one normalized vector per
token) for the embed task, its ``colqwen2`` workflow and its stages."""

from __future__ import annotations

from dataclasses import replace

from wde_core.plugin_api import EMBED_WORKFLOW, ArchitectureLink, Task, hookimpl

_S = "wde_qwen2_vl.stages"


@hookimpl
def wde_register_tasks(register):
    """late_interaction: MaxSim scores and rankings of multi-vector models (served by embed-linked models)."""
    register(Task("late_interaction", {"multi_vector_scores": "wde_qwen2_vl.tasks:multi_vector_scores",
                                       "multi_vector_rerank": "wde_qwen2_vl.tasks:multi_vector_rerank"},
                  inputs="queries (str) and documents (page images or texts)", served_by=("embed",),
                  description="MaxSim scores between multi-vector queries and documents (ColQwen2)"))


@hookimpl
def wde_register_architectures(register):
    """``ColQwen2ForRetrieval`` on the colqwen2 workflow."""
    register(ArchitectureLink(
        architecture="ColQwen2ForRetrieval", task="embed", workflow="colqwen2", model="wde_qwen2_vl.model:ColQwen2",
        defaults={"pooling": "last", "normalize": False, "max_model_len": 8192},  # pages of up to ~8k tokens
        configure="wde_qwen2_vl.settings:configure",
        description="ColQwen2: text queries and page images -> one vector per token (output='multi_vector')",
    ))


@hookimpl
def wde_register_workflows(register):
    """The embed workflow with query/page stages and the multi-vector output."""
    register(replace(EMBED_WORKFLOW, name="colqwen2", input_processor="query-page", tokenizer="colqwen2",
                     model_input_builder="query-page", output_processor="multi-vector",
                     description="queries and page images -> [tokens, dim] per input (output='multi_vector')"))


@hookimpl
def wde_register_input_processors(register):
    """Queries (str) and pages (images) in one list."""
    register("query-page", f"{_S}:QueryPageInputProcessor", "str queries and page images, mixed")


@hookimpl
def wde_register_tokenizers(register):
    """The directory's ColQwen2Processor: query prefix and augmentation, the page's visual prompt and patches."""
    register("colqwen2", f"{_S}:QueryPageTokenizer", "ColQwen2Processor: queries and pages as it lays them out")


@hookimpl
def wde_register_model_input_builders(register):
    """The packed batch plus the pages' patches."""
    register("query-page", f"{_S}:QueryPageBatchBuilder", "packed batch with the pages' patches and grids")


@hookimpl
def wde_register_output_processors(register):
    """Every token's normalized vector."""
    register("multi-vector", f"{_S}:MultiVectorOutputProcessor", "[tokens, dim] per input (late interaction)")
