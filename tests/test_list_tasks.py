"""``wde list-tasks``: every task with its front-end methods, inputs and the architectures (and workflows) that
serve it, from the plugins installed in this environment and from a test plugin that registers a task of its own;
the architectures are checked against ``wde list-workflows``, which reaches the same links from the workflows."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from click.testing import CliRunner

from wde_core.cli.main import cli
from wde_core.plugin_api import EMBED_WORKFLOW, ArchitectureLink, Task, hookimpl

BERT = {"architecture": "BertModel", "task": "embed", "variant": "", "workflow": "embed", "provider": "wde-bert"}
CROSS_ENCODER = {"architecture": "BertForSequenceClassification", "task": "rerank", "variant": "single-logit",
                 "workflow": "rerank", "provider": "wde-reranker"}


def invoke(*args: str):
    """``wde ARGS`` in process on the current plugin host; asserts it succeeded."""
    result = CliRunner().invoke(cli, list(args))
    assert result.exit_code == 0, (result.output, result.exception)
    return result


def listed_tasks() -> dict[str, dict]:
    """``wde list-tasks --json``'s rows by task name (and no problems)."""
    data = json.loads(invoke("list-tasks", "--json").stdout)
    assert data["problems"] == []
    return {row["task"]: row for row in data["tasks"]}


def links_by_task() -> dict[str, set[tuple[str, str, str, str]]]:
    """``wde list-workflows --json``'s architecture links, grouped by their task."""
    found: dict[str, set] = {}
    for workflow in json.loads(invoke("list-workflows", "--json").stdout)["workflows"]:
        for link in workflow["architectures"]:
            found.setdefault(link["task"], set()).add((link["architecture"], link["variant"], workflow["workflow"],
                                                       link["provider"]))
    return found


def as_tuples(row: dict) -> set[tuple[str, str, str, str]]:
    return {(a["architecture"], a["variant"], a["workflow"], a["provider"]) for a in row["architectures"]}


def test_the_installed_plugins_tasks_methods_and_models(isolated_host):
    tasks = listed_tasks()
    assert {"embed", "token_embed", "rerank", "classify", "similarity"} <= set(tasks)
    embed, rerank = tasks["embed"], tasks["rerank"]
    assert (embed["provider"], embed["methods"], embed["inputs"], embed["served_by"]) == (
        "wde-core", ["encode"], "a str or a list of str", ["embed"])
    assert embed["description"] == "pooled (and named) embeddings of texts"
    assert BERT in embed["architectures"] and {"embed", "bge-m3", "image-text"} <= set(embed["workflows"])
    assert (rerank["methods"], rerank["served_by"]) == (["score", "rerank"], ["rerank"])
    assert CROSS_ENCODER in rerank["architectures"] and "rerank" in rerank["workflows"]
    assert all(a["task"] == "rerank" for a in rerank["architectures"])
    # token_embed and wde-clip's similarity are served by the models linked for embed: the same rows
    assert tasks["token_embed"]["served_by"] == tasks["similarity"]["served_by"] == ["embed"]
    assert tasks["token_embed"]["architectures"] == tasks["similarity"]["architectures"] == embed["architectures"]
    assert (tasks["similarity"]["provider"], tasks["similarity"]["methods"]) == ("wde-clip", ["similarity"])
    # list-workflows reaches every link from its workflow: the same links, task by task
    by_task = links_by_task()
    for name, row in tasks.items():
        expected = set().union(*(by_task.get(t, set()) for t in row["served_by"]))
        assert as_tuples(row) == expected, name
        assert row["workflows"] == sorted({workflow for _, _, workflow, _ in expected}), name
    assert len(embed["architectures"]) >= 30 and len(rerank["architectures"]) >= 8


def test_the_table_has_one_row_per_task_then_what_serves_them(isolated_host):
    out = invoke("list-tasks").stdout
    lines = out.splitlines()
    assert lines[0].split() == ["TASK", "METHODS", "PROVIDER", "INPUTS", "DESCRIPTION"]
    rows = {line.split()[0]: line for line in lines[1:] if line and not line.startswith(" ") and ":" not in line}
    assert rows["embed"].split()[:3] == ["embed", "encode", "wde-core"]
    assert rows["rerank"].split()[:4] == ["rerank", "score,", "rerank", "wde-core"]
    assert rows["similarity"].split()[:3] == ["similarity", "similarity", "wde-clip"]
    assert rows["late_interaction"].split()[:4] == ["late_interaction", "multi_vector_scores,", "multi_vector_rerank",
                                                    "wde-late-interaction"]
    served = "embed, late_interaction, similarity, token_embed: served by the models linked for embed"
    assert served in lines
    block = out.split(served, 1)[1].split("\n\n")[0]
    assert "  workflows: " in block and "bge-m3" in block and "image-text" in block
    words = " ".join(block.split()).replace(",", "").split()
    assert {"BertModel", "XLMRobertaModel", "CLIPModel"} <= set(words)
    rerank = out.split("rerank: served by the models linked for rerank", 1)[1].split("\n\n")[0]
    assert "BertForSequenceClassification" in " ".join(rerank.split()) and "BertModel," not in rerank


def late_interaction(engine, queries, documents):
    """A test task's prepare function (listing never imports it)."""
    raise NotImplementedError


class ProbePlugin:
    """A task with its own workflow and output processor, linked for one architecture; a task served by the embed
    models; and a task no model serves yet."""

    @staticmethod
    @hookimpl
    def wde_register_tasks(register):
        register(Task("probe", {"probe_scores": "test_list_tasks:late_interaction"},
                      inputs="queries and documents", description="a test task"))
        register(Task("probe_embed", {"probe_vectors": "test_list_tasks:late_interaction"},
                      served_by=("embed",)))
        register(Task("orphan", {"orphan_method": "test_list_tasks:late_interaction"}))

    @staticmethod
    @hookimpl
    def wde_register_output_processors(register):
        register("probe", "wde_core.stages.output:EmbeddingOutputProcessor")

    @staticmethod
    @hookimpl
    def wde_register_workflows(register):
        register(replace(EMBED_WORKFLOW, name="probe-flow", output_processor="probe"))

    @staticmethod
    @hookimpl
    def wde_register_architectures(register):
        register(ArchitectureLink(architecture="ProbeModel", task="probe", workflow="probe-flow",
                                  model="wde_core.stages.output:EmbeddingOutputProcessor"))
        register(ArchitectureLink(architecture="ProbeModel", task="probe", workflow="probe-flow", variant="v2",
                                  matches="test_list_tasks:late_interaction",
                                  model="wde_core.stages.output:EmbeddingOutputProcessor"))


@pytest.mark.parametrize("use_entry_points", [False, True])
def test_a_plugins_own_task_is_listed_with_its_workflow_and_architecture(register_plugin, use_entry_points):
    register_plugin(("probe-plugin", ProbePlugin), use_entry_points=use_entry_points)
    tasks = listed_tasks()
    assert tasks["probe"] == {
        "task": "probe", "provider": "probe-plugin", "methods": ["probe_scores"], "inputs": "queries and documents",
        "description": "a test task", "served_by": ["probe"], "workflows": ["probe-flow"],
        "architectures": [{"architecture": "ProbeModel", "task": "probe", "variant": v, "workflow": "probe-flow",
                           "provider": "probe-plugin"} for v in ("", "v2")]}
    assert tasks["probe_embed"]["architectures"] == tasks["embed"]["architectures"]
    assert tasks["probe_embed"]["served_by"] == ["embed"] and "ProbeModel" not in str(tasks["embed"])
    assert (tasks["orphan"]["architectures"], tasks["orphan"]["workflows"]) == ([], [])
    if not use_entry_points:  # the core and this plugin alone: exactly their tasks
        assert set(tasks) >= {"embed", "token_embed", "rerank", "classify"}
        assert tasks["embed"]["architectures"] == [] and "similarity" not in tasks
    out = invoke("list-tasks").stdout
    assert "probe: served by the models linked for probe\n  workflows: probe-flow\n  architectures: ProbeModel\n" \
        in out
    assert "orphan: served by the models linked for orphan\n  workflows: none\n  architectures: none\n" in out
    assert any(line.split()[:3] == ["probe", "probe_scores", "probe-plugin"] for line in out.splitlines())
