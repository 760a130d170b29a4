"""More registration rules: command clashes, allowlist typos, malformed hook answers, blame in
lookup errors, and the model's ``after_load_weights`` step."""

from __future__ import annotations

import click
import pytest
import torch
from click.testing import CliRunner

from wde_core import Engine, NoWorkflowError, assemble_pipeline, hookimpl
from wde_core.cli.main import cli
from wde_core.plugins.host import PluginHost


class ClashingCommands:
    """Adds a command named ``encode`` (taken by the core) and a new ``hello``."""

    @staticmethod
    @hookimpl
    def wde_register_commands(cli):
        @cli.command("inspect")
        def fake_inspect():
            click.echo("not the real inspect")

        @cli.command("hello")
        def hello():
            click.echo("hello from clashing")


def test_a_command_name_already_taken_is_refused_and_reported():
    host = PluginHost(use_entry_points=False).load(extra_plugins=[("clashing", ClashingCommands)])
    group = click.Group("wde", commands=dict(cli.commands))  # the core's commands are defined on the wde group
    host.register_commands(group)
    assert [str(p) for p in host.problems] == [
        "clashing: duplicate command 'inspect': already provided by 'wde-core', refused"]
    assert group.commands["inspect"].callback.__module__ == "wde_core.cli.main"
    assert CliRunner().invoke(group, ["hello"]).output == "hello from clashing\n"
    host.register_commands(group)  # registering again (a second main()) adds no new problem
    assert len(host.problems) == 1


def test_an_allowlisted_name_that_no_plugin_has_is_reported(monkeypatch):
    monkeypatch.setenv("WDE_PLUGINS", "wde-bert,wde-bret")
    host = PluginHost().load()
    assert "wde-bert" in host.plugins and "wde-example" not in host.plugins
    assert [str(p) for p in host.problems] == [
        "wde-bret: named in WDE_PLUGINS but no installed plugin has that entry-point name"]


class BadSelector:
    """Answers the attention-backend question with a bare string."""

    @staticmethod
    @hookimpl
    def wde_select_attention_backend(device, dtype, causal):
        return "eager"


def test_a_malformed_backend_answer_is_a_clear_error(register_plugin, tiny_bert_dir):
    register_plugin(("bad-selector", BadSelector))  # in-process plugins register last, so answer first
    with pytest.raises(TypeError, match=r"wde_select_attention_backend returned 'eager'; expected \(backend_name, reason\)"):
        assemble_pipeline(str(tiny_bert_dir), device="cpu")


def test_an_unknown_backend_blames_where_its_name_came_from(tiny_bert_dir, monkeypatch):
    monkeypatch.setenv("WDE_ATTENTION_BACKEND", "nope")
    with pytest.raises(LookupError, match=r"no attention backend 'nope' \(named by environment variable WDE_ATTENTION_BACKEND\)"):
        assemble_pipeline(str(tiny_bert_dir))
    monkeypatch.delenv("WDE_ATTENTION_BACKEND")
    with pytest.raises(LookupError, match=r"no executor 'fast' \(named by engine argument executor\)"):
        assemble_pipeline(str(tiny_bert_dir), executor="fast")


def test_after_load_weights_runs_on_the_final_device_and_dtype(tiny_bert_dir, monkeypatch):
    from wde_bert.model import BertEncoder

    seen = []

    def after_load_weights(self):
        seen.append((self.layers[0].qkv.weight.device.type, self.layers[0].qkv.weight.dtype,
                     float(self.embeddings.LayerNorm.weight.abs().sum())))

    monkeypatch.setattr(BertEncoder, "after_load_weights", after_load_weights, raising=False)
    Engine(str(tiny_bert_dir), dtype="bfloat16")
    assert seen and seen[0][:2] == ("cpu", torch.bfloat16) and seen[0][2] > 0


# --- link variants and configure --------------------------------------------------------------
MARKER = "marker.txt"


def has_marker(directory):
    """Matcher of the ``marked`` variant: the directory holds ``marker.txt``."""
    return f"{MARKER} present" if (directory.path / MARKER).is_file() else None


def mean_pooling_for_marked(propose, directory, args):
    """The ``marked`` variant suggests mean pooling (the engine argument still wins)."""
    propose.suggest("pooling", "mean", "marked variant: mean pooling")


class MarkedVariant:
    """Links a ``marked`` variant of BertModel, chosen when the directory holds marker.txt."""

    @staticmethod
    @hookimpl
    def wde_register_architectures(register):
        from wde_core import ArchitectureLink

        register(ArchitectureLink("BertModel", "embed", "embed", "wde_bert.model:BertEncoder", variant="marked",
                                  matches="test_plugin_rules:has_marker",
                                  configure="test_plugin_rules:mean_pooling_for_marked"))


def test_a_matching_variant_wins_over_the_plain_link_and_configures_settings(register_plugin, tiny_bert_dir,
                                                                               tmp_path):
    import shutil

    register_plugin(("marked", MarkedVariant))
    plain = assemble_pipeline(str(tiny_bert_dir))
    assert plain.link.variant == "" and plain.settings.pooling == "cls"
    marked_dir = shutil.copytree(tiny_bert_dir, tmp_path / "marked")
    (marked_dir / MARKER).write_text("x")
    marked = assemble_pipeline(str(marked_dir))
    assert marked.link.variant == "marked" and marked.link.provider == "marked"
    assert "(marker.txt present)" in marked.reasons["workflow"]
    assert marked.settings.pooling == "mean" and marked.reasons["pooling"] == "marked variant: mean pooling"
    assert assemble_pipeline(str(marked_dir), pooling="max").settings.pooling == "max"
    with pytest.raises(NoWorkflowError, match="variants 'marked' and 'marked2' of BertModel both apply"):
        register_plugin(("marked", MarkedVariant), ("marked2", _renamed_variant("marked2")))
        assemble_pipeline(str(marked_dir))


def _renamed_variant(name):
    class Renamed:
        @staticmethod
        @hookimpl
        def wde_register_architectures(register):
            from wde_core import ArchitectureLink

            register(ArchitectureLink("BertModel", "embed", "embed", "wde_bert.model:BertEncoder", variant=name,
                                      matches="test_plugin_rules:has_marker"))

    return Renamed


def test_a_variant_needs_a_matcher_and_a_matcher_a_variant(register_plugin):
    class Unnamed:
        @staticmethod
        @hookimpl
        def wde_register_architectures(register):
            from wde_core import ArchitectureLink

            register(ArchitectureLink("BertModel", "embed", "embed", "wde_bert.model:BertEncoder",
                                      matches="test_plugin_rules:has_marker"))

    host = register_plugin(("unnamed", Unnamed))
    assert any("a link with `matches` needs a `variant` name" in str(p) for p in host.problems)
