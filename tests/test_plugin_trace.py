"""Hooks go through pluggy (so its call monitoring and wrappers see every one), ``WDE_TRACE_PLUGINS=1``
prints each call with its plugin, and plugins that could not load are named where the user meets them."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import types

import pytest

from wde_core import NoWorkflowError, assemble_pipeline, hookimpl
from wde_core.plugins.host import STAGE_HOOKS, PluginHost

REGISTRATION_HOOKS = ["wde_register_tasks", *STAGE_HOOKS.values(), "wde_register_workflows",
                      "wde_register_architectures", "wde_register_model_sources"]


class Wrapping:
    """A new-style pluggy wrapper around the workflow registrations of every plugin."""

    seen: list[str] = []

    @staticmethod
    @hookimpl(wrapper=True)
    def wde_register_workflows(register):
        Wrapping.seen.append("before")
        result = yield
        Wrapping.seen.append("after")
        return result


def test_every_registration_hook_is_called_through_pluggy_one_plugin_at_a_time():
    host = PluginHost()
    calls: list[tuple[str, tuple[str, ...]]] = []
    host.pm.add_hookcall_monitoring(
        lambda name, impls, kwargs: calls.append((name, tuple(i.plugin_name for i in impls))), lambda *a: None)
    Wrapping.seen.clear()
    host.load(extra_plugins=[("wrapping", Wrapping)])
    for hook in REGISTRATION_HOOKS:
        implementers = {i.plugin_name for i in getattr(host.pm.hook, hook).get_hookimpls()} - {"wrapping"}
        called = [plugins for name, plugins in calls if name == hook]
        assert {p for plugins in called for p in plugins if p != "wrapping"} == implementers, hook
        assert all(len(set(plugins) - {"wrapping"}) == 1 for plugins in called), (hook, called)  # one each
    workflow_providers = {wf.provider for wf in host.registry.workflows.values()}
    assert Wrapping.seen == ["before", "after"] * len(workflow_providers)  # the wrapper saw each plugin's call
    assert {"wde-core", "wde-bert"} <= {p for _, plugins in calls for p in plugins}


def run_wde(*args: str, trace: str | None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "WDE_TRACE_PLUGINS"}
    if trace is not None:
        env["WDE_TRACE_PLUGINS"] = trace
    code = "from wde_core.cli.main import main; main()"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, timeout=300)


def test_trace_plugins_prints_every_hook_call_with_its_plugin_and_time():
    traced = run_wde("encode", "hi", trace="1")
    assert traced.returncode == 0, traced.stderr
    lines = [line for line in traced.stderr.splitlines() if line.startswith("wde trace: ")]
    pattern = re.compile(r"wde trace: (wde_\w+)\((.*)\) by ([\w, -]+?)(?: -> (.*))? in (\d+\.\d\d) ms$")
    parsed = [pattern.match(line) for line in lines]
    assert all(parsed), [line for line, m in zip(lines, parsed) if not m]
    by_hook = {}
    for m in parsed:
        by_hook.setdefault(m.group(1), []).append(m)
    task_plugins = [m.group(3) for m in by_hook["wde_register_tasks"]]  # one plugin per call (wde-clip's too)
    assert "wde-core" in task_plugins and all("," not in name for name in task_plugins), task_plugins
    assert "wde-bert" in {m.group(3) for m in by_hook["wde_register_architectures"]}
    assert set(REGISTRATION_HOOKS) | {"wde_register_commands", "wde_get_default_model", "wde_get_cpu_policy",
                                      "wde_select_attention_backend", "wde_on_pipeline_assembled"} <= set(by_hook)
    default = by_hook["wde_get_default_model"][0]
    assert (default.group(3), default.group(4)) == ("wde-bert", "'sentence-transformers/all-MiniLM-L6-v2'")
    backend = by_hook["wde_select_attention_backend"][0]
    assert "device=device(type='cpu')" in backend.group(2) and backend.group(4).startswith("('")
    assert traced.stdout.startswith('{"embedding": [')  # the command's own output is untouched
    quiet = run_wde("encode", "hi", trace="0")
    assert quiet.returncode == 0 and "wde trace:" not in quiet.stderr and quiet.stdout == traced.stdout


def test_a_plugin_without_hooks_is_a_reported_problem():
    empty = types.ModuleType("acme_plugin")  # an entry point naming the wrong module looks like this
    host = PluginHost(use_entry_points=False).load(extra_plugins=[("acme", empty)])
    assert [str(p) for p in host.problems] == [
        "acme: 'acme_plugin' from (in process) implements no wde hook (functions named wde_* marked with "
        "wde_core.plugin_api.hookimpl); plugin not loaded"]
    assert "acme" not in host.plugins and host.pm.get_plugin("acme") is None


class MisspeltArchitectures:
    """Would serve BertModel, but its hook name is misspelt."""

    @staticmethod
    @hookimpl
    def wde_register_architecture(register):
        raise AssertionError("never called")


def test_no_workflow_error_names_the_refused_plugins_and_why(register_plugin, tiny_bert_dir):
    register_plugin(("acme-bert", MisspeltArchitectures), use_entry_points=False)
    with pytest.raises(NoWorkflowError) as raised:
        assemble_pipeline(str(tiny_bert_dir), device="cpu")
    message = str(raised.value)
    assert "no installed plugin serves architecture BertModel" in message
    assert ("Plugins with problems: acme-bert: implements unknown hook(s) 'wde_register_architecture' (did you mean "
            "'wde_register_architectures'?); plugin not loaded.") in message
