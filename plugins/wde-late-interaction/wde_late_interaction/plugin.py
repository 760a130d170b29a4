"""Registers the ``late_interaction`` task (MaxSim scores and rankings, served by embed-linked models) and the
``multi-vector`` output processor that multi-vector models' workflows name (ColQwen2's, ColPali's)."""

from __future__ import annotations

from wde_core.plugin_api import Task, hookimpl

_T = "wde_late_interaction.tasks"


@hookimpl
def wde_register_tasks(register):
    """late_interaction: MaxSim scores and rankings of multi-vector models (served by embed-linked models)."""
    register(Task("late_interaction", {"multi_vector_scores": f"{_T}:multi_vector_scores",
                                       "multi_vector_rerank": f"{_T}:multi_vector_rerank"},
                  inputs="queries (str) and documents (page images or texts)", served_by=("embed",),
                  description="MaxSim scores between multi-vector queries and documents (ColQwen2, ColPali)"))


@hookimpl
def wde_register_output_processors(register):
    """Every token's normalized vector."""
    register("multi-vector", "wde_late_interaction.multi_vector:MultiVectorOutputProcessor",
             "[tokens, dim] per input (late interaction)")
