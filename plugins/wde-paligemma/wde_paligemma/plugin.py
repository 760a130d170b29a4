"""Registers ColPali (``ColPaliForRetrieval``: PaliGemma's SigLIP vision tower, projector and Gemma decoder, one
normalized vector per token) for the embed task, and its workflow: wde-vision-language's query/page input processor
and wde-late-interaction's multi-vector output (its ``late_interaction`` task scores them by MaxSim) around ColPali's
tokenizer and batches."""

from __future__ import annotations

from dataclasses import replace

from wde_core.plugin_api import EMBED_WORKFLOW, ArchitectureLink, hookimpl

_S = "wde_paligemma.stages"


@hookimpl
def wde_register_architectures(register):
    """``ColPaliForRetrieval`` on the colpali workflow."""
    register(ArchitectureLink(
        architecture="ColPaliForRetrieval", task="embed", workflow="colpali", model="wde_paligemma.model:ColPali",
        # ColPali-v1.3's pages: 1,024 image tokens and a few more
        defaults={"pooling": "last", "normalize": False, "max_model_len": 2048},
        configure="wde_paligemma.settings:configure",
        description="ColPali: text queries and page images -> one vector per token (output='multi_vector')",
    ))


@hookimpl
def wde_register_workflows(register):
    """The embed workflow with query/page stages, ColPali's tokenizer and batches, the multi-vector output."""
    register(replace(EMBED_WORKFLOW, name="colpali", input_processor="query-page", tokenizer="colpali",
                     model_input_builder="colpali", output_processor="multi-vector",
                     description="queries and page images (PaliGemma) -> [tokens, dim] per input "
                                 "(output='multi_vector')"))


@hookimpl
def wde_register_tokenizers(register):
    """The directory's ColPaliProcessor: the query prefix and augmentation, a page's image tokens and prompt."""
    register("colpali", f"{_S}:ColPaliTokenizer", "ColPaliProcessor: queries and pages as it lays them out")


@hookimpl
def wde_register_model_input_builders(register):
    """The packed batch plus the pages' pixels."""
    register("colpali", f"{_S}:ColPaliBatchBuilder", "packed batch with the pages' pixels stacked")
