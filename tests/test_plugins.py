"""The plugin machinery: entry points, the example plugin, refused registrations, broken plugins,
the ``WDE_PLUGINS`` allowlist, hook-free batches, and a walk over every hookspec."""

from __future__ import annotations

import ast
import functools
import inspect
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from conftest import TOKENIZER_FILES, auto_cpu_backend, minilm_path
from wde_core import ArchitectureLink, Engine, NoWorkflowError, Workflow, assemble_pipeline, hookimpl
from wde_core.plugins import hookspecs
from wde_core.cli.main import cli
from wde_core.plugins.host import PluginHost, get_plugin_host
from wde_core.stages.request import Request

ROOT = Path(__file__).resolve().parents[1]
ARCH = "ExampleBagOfEmbeddings"
TEXTS = ["Hello World", "The quick brown fox", "fun are the Fun"]


# --- helpers -------------------------------------------------------------------------------------
def save_example_model(directory: Path, hidden: int = 32) -> Path:
    """An ``ExampleBagOfEmbeddings`` directory: BERT config, random weights, a *cased* tokenizer."""
    from safetensors.torch import save_file
    from transformers import BertConfig

    BertConfig(vocab_size=30522, hidden_size=hidden, num_hidden_layers=1, num_attention_heads=4,
               intermediate_size=64, max_position_embeddings=64, architectures=[ARCH]).save_pretrained(directory)
    g = torch.Generator().manual_seed(7)
    save_file({"embeddings.word_embeddings.weight": torch.randn(30522, hidden, generator=g),
               "embeddings.LayerNorm.weight": 1 + 0.1 * torch.randn(hidden, generator=g),
               "embeddings.LayerNorm.bias": 0.1 * torch.randn(hidden, generator=g)}, directory / "model.safetensors")
    for name in TOKENIZER_FILES:
        shutil.copy(minilm_path() / name, directory / name)
    # Turn off the tokenizer's own lower-casing, so only the plugin's input processor lower-cases.
    tok = json.loads((directory / "tokenizer.json").read_text())
    tok["normalizer"]["lowercase"] = False
    (directory / "tokenizer.json").write_text(json.dumps(tok))
    config = json.loads((directory / "tokenizer_config.json").read_text())
    (directory / "tokenizer_config.json").write_text(json.dumps({**config, "do_lower_case": False}))
    return directory


def reference(directory: Path, texts: list[str], lowercase: bool = True) -> np.ndarray:
    """Whitespace words -> vocab ids -> embedding -> LayerNorm -> mean -> L2, in numpy."""
    from safetensors.numpy import load_file

    w = load_file(str(directory / "model.safetensors"))
    vocab = {t: i for i, t in enumerate((directory / "vocab.txt").read_text(encoding="utf-8").splitlines())}
    out = []
    for text in texts:
        words = (text.lower() if lowercase else text).split()
        ids = [vocab["[CLS]"]] + [vocab.get(word, vocab["[UNK]"]) for word in words] + [vocab["[SEP]"]]
        x = w["embeddings.word_embeddings.weight"][ids].astype(np.float64)
        x = (x - x.mean(1, keepdims=True)) / np.sqrt(x.var(1, keepdims=True) + 1e-12)
        v = (x * w["embeddings.LayerNorm.weight"] + w["embeddings.LayerNorm.bias"]).mean(0)
        out.append(v / np.linalg.norm(v))
    return np.array(out)


def messages(host: PluginHost, plugin: str) -> list[str]:
    """The problem messages reported for ``plugin``."""
    return [p.message for p in host.problems if p.plugin == plugin]


def workflow(name: str, **stages: str) -> Workflow:
    """A workflow of the core's components, with ``stages`` replaced."""
    chosen = dict(input_processor="text", tokenizer="hf-fast", scheduler="token-budget", model_input_builder="flat",
                  executor="sync", worker="model", output_processor="embedding", engine_args="default")
    return Workflow(name=name, **{**chosen, **stages})


def in_process(**hooks):
    """A plugin object (a class) whose hook implementations are ``hooks``, each taking ``register``."""
    return type("InProcessPlugin", (), {name: staticmethod(hookimpl(fn)) for name, fn in hooks.items()})


@pytest.fixture(scope="module")
def example_dir(tmp_path_factory) -> Path:
    return save_example_model(tmp_path_factory.mktemp("example-bag"))


# --- entry-point plugins and the example plugin --------------------------------------------------
def test_entry_point_plugins_load_with_distribution_version_and_hooks(isolated_host):
    plugins = isolated_host.plugins
    assert {"wde-core", "wde-bert", "wde-example"} <= set(plugins)
    assert (plugins["wde-bert"].distribution, plugins["wde-bert"].version) == ("wde-bert", "0.1.0")
    assert {"wde_get_default_model", "wde_register_architectures", "wde_register_model_sources"} <= set(
        plugins["wde-bert"].hooks)
    assert (plugins["wde-example"].distribution, plugins["wde-example"].version) == ("wde-example", "0.1.0")
    assert plugins["wde-example"].hooks == [
        "wde_on_pipeline_assembled", "wde_register_architectures", "wde_register_commands",
        "wde_register_engine_args", "wde_register_input_processors", "wde_register_schedulers",
        "wde_register_workflows", "wde_select_attention_backend"]
    assert plugins["wde-core"].distribution == "wde-core"
    assert isolated_host.problems == [] and isolated_host.registry.check_imports() == []


def test_example_registrations_carry_their_provider(isolated_host):
    reg = isolated_host.registry
    wf = reg.workflows["example-lowercase-embed"]
    assert (wf.provider, wf.input_processor, wf.scheduler, wf.engine_args) == (
        "wde-example", "lowercase-text", "shortest-first", "example")
    assert reg.components["input_processor"]["lowercase-text"].provider == "wde-example"
    assert reg.components["scheduler"]["shortest-first"].target == "wde_example.stages:ShortestFirstScheduler"
    assert reg.components["tokenizer"]["hf-fast"].provider == "wde-core"
    link = reg.links[(ARCH, "embed", "")]
    assert (link.provider, link.workflow, link.model) == (
        "wde-example", "example-lowercase-embed", "wde_example.model:BagOfEmbeddings")
    assert reg.workflows["embed"].provider == "wde-core"


def test_example_engine_matches_numpy_and_uses_the_plugins_stages(example_dir):
    from wde_example import plugin as example_plugin
    from wde_example.stages import LowercaseTextInputProcessor, ShortestFirstScheduler

    engine = Engine(str(example_dir), device="cpu")
    assert engine.pipeline.workflow.name == "example-lowercase-embed"
    assert example_plugin.SEEN_PIPELINES[-1] is engine.pipeline
    assert isinstance(engine.input_processor, LowercaseTextInputProcessor)
    assert [r.text for r in engine.input_processor.process(TEXTS)] == [t.lower() for t in TEXTS]
    assert isinstance(engine.scheduler, ShortestFirstScheduler)
    got = engine.encode(TEXTS)
    assert got.shape == (3, 32)
    np.testing.assert_allclose(got, reference(example_dir, TEXTS), atol=1e-5)
    # The workflow's own engine argument: without lower-casing, the cased tokenizer sees [UNK]s.
    raw = Engine(str(example_dir), device="cpu", lowercase=False).encode(TEXTS)
    np.testing.assert_allclose(raw, reference(example_dir, TEXTS, lowercase=False), atol=1e-5)
    assert not np.allclose(raw[0], got[0], atol=1e-3)
    engine.scheduler.add([Request(i, "x", token_ids=[0] * n) for i, n in enumerate([5, 2, 9, 2, 4])])
    engine.scheduler.max_tokens = 9  # shortest first: 2 + 2 + 4 tokens, then 5, then 9 (within a batch the
    batches = [sorted(r.index for r in engine.scheduler.schedule()) for _ in range(3)]  # core puts the longest first)
    assert batches == [[1, 3, 4], [0], [2]]


def test_workflow_engine_args_are_refused_elsewhere(tiny_bert_dir):
    with pytest.raises(TypeError, match=r"unknown engine argument\(s\) lowercase; accepted by workflow 'embed'"):
        assemble_pipeline(str(tiny_bert_dir), lowercase=False)


def test_force_eager_env_selects_eager_with_the_plugins_reason(monkeypatch, isolated_host, tiny_bert_dir):
    monkeypatch.delenv("WDE_ATTENTION_BACKEND", raising=False)
    monkeypatch.delenv("WDE_EXAMPLE_FORCE_EAGER", raising=False)
    plain = assemble_pipeline(str(tiny_bert_dir), device="cpu")
    name, _, reason = auto_cpu_backend()
    assert (plain.components["attention_backend"].name, plain.reasons["attention_backend"]) == (name, reason)
    assert (plain.workflow.name, plain.components["input_processor"].name) == ("embed", "text")
    monkeypatch.setenv("WDE_EXAMPLE_FORCE_EAGER", "1")
    forced = assemble_pipeline(str(tiny_bert_dir), device="cpu")
    assert forced.components["attention_backend"].name == "eager"
    assert forced.reasons["attention_backend"] == "example plugin: WDE_EXAMPLE_FORCE_EAGER is set"


# --- refused registrations -------------------------------------------------------------------------
DUPLICATE_WORKFLOW = in_process(wde_register_workflows=lambda register: register(workflow("embed")))
DUPLICATE_COMPONENT = in_process(wde_register_input_processors=lambda register: register(
    "text", "wde_core.stages.input_processor:TextInputProcessor"))
DUPLICATE_LINK = in_process(wde_register_architectures=lambda register: register(
    ArchitectureLink("BertModel", "embed", "embed", "wde_bert.model:BertEncoder")))


@pytest.mark.parametrize("plugin, what, owner, kept", [
    (DUPLICATE_WORKFLOW, "duplicate workflow 'embed'", "wde-core", lambda r: r.workflows["embed"]),
    (DUPLICATE_COMPONENT, "duplicate input processor 'text'", "wde-core",
     lambda r: r.components["input_processor"]["text"]),
    (DUPLICATE_LINK, "duplicate architecture 'BertModel' for task 'embed'", "wde-bert",
     lambda r: r.links[("BertModel", "embed", "")]),
], ids=["workflow", "component", "architecture-link"])
def test_duplicates_are_refused_naming_both_providers(register_plugin, plugin, what, owner, kept):
    host = register_plugin(("intruder", plugin))
    [message] = messages(host, "intruder")
    assert what in message
    assert f"already registered by {owner!r}, refused from 'intruder'" in message
    assert kept(host.registry).provider == owner


def test_duplicate_between_two_in_process_plugins(register_plugin):
    def scheduler_plugin():
        return in_process(wde_register_schedulers=lambda register: register(
            "fifo-x", "wde_core.stages.scheduler:TokenBudgetScheduler"))

    host = register_plugin(("one", scheduler_plugin()), ("two", scheduler_plugin()), use_entry_points=False)
    winner = host.registry.components["scheduler"]["fifo-x"].provider
    loser = {"one": "two", "two": "one"}[winner]
    assert messages(host, loser) == [f"wde_register_schedulers: duplicate scheduler 'fifo-x': "
                                     f"already registered by {winner!r}, refused from {loser!r}"]


def register_bad_paths(register):
    register("missing-module", "no_such_module:X")
    register("malformed", "not an import path")
    register("ghost", "wde_core.stages.tokenizer:NoSuchTokenizer")


BAD_PATHS = in_process(wde_register_tokenizers=register_bad_paths)


def test_unresolvable_and_malformed_paths_name_the_plugin(register_plugin):
    host = register_plugin(("bad-paths", BAD_PATHS))
    assert messages(host, "bad-paths") == [
        "wde_register_tokenizers: import path 'no_such_module:X' does not resolve: no module 'no_such_module'",
        "wde_register_tokenizers: import path 'not an import path' is not of the form 'package.module:attr'"]
    mine = {name for name, c in host.registry.components["tokenizer"].items()
            if c.provider in ("wde-core", "bad-paths")}
    assert mine == {"hf-fast", "ghost"}  # the two refused paths are not registered


def test_list_workflows_check_names_a_missing_attribute(register_plugin):
    register_plugin(("bad-paths", BAD_PATHS))
    get_plugin_host().register_commands(cli)
    result = CliRunner().invoke(cli, ["list-workflows", "--check"])
    assert result.exit_code == 1
    assert ("problem: bad-paths: import path 'wde_core.stages.tokenizer:NoSuchTokenizer' failed: AttributeError("
            in result.stderr)
    assert "NoSuchTokenizer" not in CliRunner().invoke(cli, ["list-workflows"]).stderr


def explode(register):
    raise RuntimeError("boom")


EXPLODES = in_process(wde_register_workflows=explode)
FINE = in_process(wde_register_workflows=lambda register: register(workflow("fine-embed", scheduler="shortest-first")))


def test_a_raising_register_hook_is_reported_and_others_still_register(register_plugin, tiny_bert_dir):
    host = register_plugin(("explodes", EXPLODES), ("fine", FINE))
    assert messages(host, "explodes") == ["wde_register_workflows raised RuntimeError('boom')"]
    assert host.registry.workflows["fine-embed"].provider == "fine"
    assert host.registry.workflows["example-lowercase-embed"].provider == "wde-example"
    assert assemble_pipeline(str(tiny_bert_dir), device="cpu").link.provider == "wde-bert"


SUBPROCESS = """
import json, sys
from wde_core import Engine, get_plugin_host
host = get_plugin_host()
vectors = Engine(sys.argv[1], device="cpu").encode(["hello world", "plugins"])
print(json.dumps({"plugins": sorted(host.plugins), "vectors": vectors.tolist(),
                  "problems": [[p.plugin, p.message] for p in host.problems]}))
"""


def test_a_plugin_that_fails_to_import_is_reported_and_bert_still_encodes(tmp_path, tiny_bert_dir):
    site = tmp_path / "site"
    (site / "wde_broken").mkdir(parents=True)
    (site / "wde_broken" / "__init__.py").write_text("raise RuntimeError('wde_broken exploded at import')\n")
    dist_info = site / "wde_broken-0.1.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text("Metadata-Version: 2.1\nName: wde-broken\nVersion: 0.1\n")
    (dist_info / "entry_points.txt").write_text("[wde]\nwde-broken = wde_broken\n")
    env = {k: v for k, v in os.environ.items() if k != "WDE_PLUGINS"} | {"PYTHONPATH": str(site)}
    proc = subprocess.run([sys.executable, "-c", SUBPROCESS, str(tiny_bert_dir)], capture_output=True, text=True,
                          env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["problems"] == [["wde-broken", "failed to load 'wde_broken' from wde-broken: "
                                              "RuntimeError('wde_broken exploded at import')"]]
    assert {"wde-bert", "wde-core", "wde-example"} <= set(out["plugins"]) and "wde-broken" not in out["plugins"]
    assert "wde plugin wde-broken: failed to load" in proc.stderr
    expected = Engine(str(tiny_bert_dir), device="cpu").encode(["hello world", "plugins"])
    np.testing.assert_allclose(np.array(out["vectors"]), expected, atol=1e-5)


# --- the WDE_PLUGINS allowlist and missing workflows -----------------------------------------------
def test_allowlist_loads_only_the_named_plugins(monkeypatch, register_plugin, example_dir):
    monkeypatch.setenv("WDE_PLUGINS", "wde-bert")
    host = register_plugin()
    assert set(host.plugins) == {"wde-core", "wde-bert"}
    assert "example-lowercase-embed" not in host.registry.workflows
    with pytest.raises(NoWorkflowError, match=f"no installed plugin serves architecture {ARCH}"):
        assemble_pipeline(str(example_dir))


def test_core_alone_names_the_missing_plugin(monkeypatch, register_plugin, tiny_bert_dir):
    monkeypatch.setenv("WDE_PLUGINS", "")
    host = register_plugin()
    assert set(host.plugins) == {"wde-core"}
    assert set(host.registry.workflows) == {"embed"} and host.registry.links == {}
    with pytest.raises(NoWorkflowError) as info:
        assemble_pipeline(str(tiny_bert_dir))
    message = str(info.value)
    assert "no installed plugin serves architecture BertModel" in message
    assert "Installed plugins: wde-core." in message
    left_out = message.split("Installed but left out by WDE_PLUGINS='': ")[1].split(".")[0].split(", ")
    assert {"wde-bert", "wde-example", "wde-reranker", "wde-server"} <= set(left_out), message
    assert message.endswith("wde-bert would serve it: add its entry point to WDE_PLUGINS.")


def test_a_missing_plugin_is_named_with_its_install_command(register_plugin, tiny_bert_dir):
    host = register_plugin(use_entry_points=False)
    assert set(host.plugins) == {"wde-core"} and not host.filtered_out
    with pytest.raises(NoWorkflowError) as info:
        assemble_pipeline(str(tiny_bert_dir))
    message = str(info.value)
    assert "Installed plugins: wde-core." in message and "left out" not in message
    assert message.endswith("Install the plugin that serves it: pip install wde-bert")


def test_unknown_architecture_and_unserved_task(isolated_host, tmp_path, tiny_bert_dir):
    from transformers import BertConfig

    BertConfig(hidden_size=32, num_attention_heads=4, architectures=["FooBarModel"]).save_pretrained(tmp_path)
    with pytest.raises(NoWorkflowError) as info:
        assemble_pipeline(str(tmp_path))
    assert str(info.value) == (f"model {str(tmp_path)!r}: no installed plugin serves architecture FooBarModel. "
                               f"Installed plugins: {', '.join(sorted(isolated_host.plugins))}.")
    assert "wde-example" in isolated_host.plugins
    with pytest.raises(NoWorkflowError, match=r"BertModel for task 'rerank'; tasks served: BertModel \(embed\)"):
        assemble_pipeline(str(tiny_bert_dir), task="rerank")


# --- no hooks per batch ----------------------------------------------------------------------------------
def test_the_per_batch_path_calls_no_hooks(isolated_host, tiny_bert_dir):
    engine = Engine(str(tiny_bert_dir), device="cpu")
    calls: list[str] = []
    undo = isolated_host.pm.add_hookcall_monitoring(lambda name, impls, kwargs: calls.append(name),
                                                     lambda outcome, name, impls, kwargs: None)
    try:
        engine.encode(["a first text", "and a second, longer text"] * 20)
        assert calls == []
        isolated_host.hook.wde_get_default_model()  # the monitor does see hook calls
        assert calls == ["wde_get_default_model"]
    finally:
        undo()


# --- every hookspec is documented, described and implemented by a test plugin ------------------------------
HOOKSPECS = sorted(n for n, f in inspect.getmembers(hookspecs, inspect.isfunction) if n.startswith("wde_"))


def hookimpls_in(path: Path) -> set[str]:
    """The hooks a test file implements: ``@hookimpl``-decorated functions and methods (``@hookimpl``,
    ``@hookimpl(...)``, ``@x.hookimpl``), and keyword arguments of ``in_process(...)`` (which wraps each value
    in ``hookimpl``)."""
    def is_hookimpl(decorator: ast.expr) -> bool:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        return (isinstance(target, ast.Name) and target.id == "hookimpl") or (
            isinstance(target, ast.Attribute) and target.attr == "hookimpl")

    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(map(is_hookimpl, node.decorator_list)):
            found.add(node.name)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "in_process":
            found |= {k.arg for k in node.keywords if k.arg}
    return found


@functools.lru_cache(maxsize=1)
def implemented_by_tests() -> dict[str, list[str]]:
    """hook name -> the test files (tests/, tests/plugins/; build copies not) that implement it."""
    implemented: dict[str, list[str]] = {}
    for path in sorted((ROOT / "tests").rglob("*.py")):
        if "build" not in path.relative_to(ROOT / "tests").parts:
            for name in hookimpls_in(path):
                implemented.setdefault(name, []).append(str(path.relative_to(ROOT)))
    return implemented


def test_the_walks_find_the_hookspecs_and_the_implementations():
    assert {"wde_register_workflows", "wde_select_attention_backend", "wde_on_pipeline_assembled"} <= set(HOOKSPECS)
    implemented = implemented_by_tests()
    assert "tests/plugins/wde-example/wde_example/plugin.py" in implemented["wde_on_pipeline_assembled"]
    assert "tests/test_plugins.py" in implemented["wde_get_default_model"]  # through in_process(...)
    assert "wde_register_tokenizer" in implemented  # test_contracts' misspelt hook: found, and no hookspec


@pytest.mark.parametrize("name", HOOKSPECS)
def test_hookspec_is_documented_and_implemented_by_a_test_plugin(name):
    spec = getattr(hookspecs, name)
    guide = ROOT / "docs" / "plugin-guide.md"
    missing = []
    if not hasattr(spec, "wde_spec"):
        missing.append("not marked with @hookspec")
    if not (spec.__doc__ or "").strip():
        missing.append("no docstring")
    if not guide.is_file() or name not in guide.read_text(encoding="utf-8"):
        missing.append(f"not in {guide.relative_to(ROOT)}")
    if name not in implemented_by_tests():
        missing.append("implemented by no test plugin under tests/ (an @hookimpl function or in_process(...))")
    assert missing == [], f"{name}: {'; '.join(missing)}"


# The hooks no other test plugin implements, each with an effect checked below: a model reached as the default
# model through a registered model source, whose own workflow uses a component from each stage hook.
HOOKED_MODEL = "hooked/tiny-bert"


def hooked_model_directory() -> str | None:
    """The hooked plugin's model source: the directory ``WDE_TEST_HOOKED_MODEL`` names."""
    return os.environ.get("WDE_TEST_HOOKED_MODEL")


HOOKED = in_process(
    wde_register_tokenizers=lambda register: register("hooked-tokenizer", "wde_core.stages.tokenizer:HFTokenizer"),
    wde_register_model_input_builders=lambda register: register(
        "hooked-flat", "wde_core.stages.model_input:FlatBatchBuilder"),
    wde_register_attention_backends=lambda register: register(
        "hooked-eager", "wde_core.attention.eager:EagerAttention"),
    wde_register_executors=lambda register: register("hooked-sync", "wde_core.stages.executor:SyncExecutor"),
    wde_register_workers=lambda register: register("hooked-worker", "wde_core.stages.worker:ModelWorker"),
    wde_register_output_processors=lambda register: register(
        "hooked-embedding", "wde_core.stages.output:EmbeddingOutputProcessor"),
    wde_register_workflows=lambda register: register(workflow(
        "hooked-embed", tokenizer="hooked-tokenizer", model_input_builder="hooked-flat", executor="hooked-sync",
        worker="hooked-worker", output_processor="hooked-embedding", attention_backend="hooked-eager")),
    wde_register_architectures=lambda register: register(ArchitectureLink(
        "HookedBertModel", "embed", "hooked-embed", "wde_bert.model:BertEncoder")),
    wde_register_model_sources=lambda register: register(HOOKED_MODEL, "test_plugins:hooked_model_directory"),
    wde_get_default_model=lambda: HOOKED_MODEL,
)


def test_stage_hooks_model_sources_and_the_default_model_take_effect(monkeypatch, register_plugin, tiny_st_bert_dir,
                                                                     tmp_path):
    from transformers import AutoTokenizer, BertModel

    directory = shutil.copytree(tiny_st_bert_dir, tmp_path / "hooked")
    config = json.loads((directory / "config.json").read_text())
    (directory / "config.json").write_text(json.dumps({**config, "architectures": ["HookedBertModel"]}))
    monkeypatch.setenv("WDE_TEST_HOOKED_MODEL", str(directory))
    monkeypatch.delenv("WDE_DEFAULT_MODEL", raising=False)
    monkeypatch.delenv("WDE_ATTENTION_BACKEND", raising=False)
    host = register_plugin(("hooked", HOOKED))
    assert messages(host, "hooked") == []
    assert host.hook.wde_get_default_model() == HOOKED_MODEL  # registered last, asked first

    engine = Engine(device="cpu")  # no model named: the default model, found through the model source
    pipeline = engine.pipeline
    assert (pipeline.model.name, pipeline.model.path) == (HOOKED_MODEL, directory)
    assert pipeline.model.found_by == "local copy registered by hooked"
    assert pipeline.reasons["model"] == "no model given; the default model from the installed plugins"
    assert (pipeline.workflow.name, pipeline.workflow.provider, pipeline.link.provider) == (
        "hooked-embed", "hooked", "hooked")
    chosen = {stage: (c.name, c.provider) for stage, c in pipeline.components.items()}
    assert chosen == {
        "input_processor": ("text", "wde-core"), "scheduler": ("token-budget", "wde-core"),
        "engine_args": ("default", "wde-core"), "tokenizer": ("hooked-tokenizer", "hooked"),
        "model_input_builder": ("hooked-flat", "hooked"), "attention_backend": ("hooked-eager", "hooked"),
        "executor": ("hooked-sync", "hooked"), "worker": ("hooked-worker", "hooked"),
        "output_processor": ("hooked-embedding", "hooked")}
    assert pipeline.reasons["attention_backend"] == "workflow 'hooked-embed' pins it"

    # the engine built from those components embeds as HF does (mean pooling, normalized: the directory's files)
    texts = ["hooks all the way down", "a default model from a registered source"]
    batch = AutoTokenizer.from_pretrained(directory)(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        states = BertModel.from_pretrained(directory, attn_implementation="eager").eval()(**batch).last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1).float()
    expected = torch.nn.functional.normalize((states * mask).sum(1) / mask.sum(1), dim=-1).numpy()
    np.testing.assert_allclose(engine.encode(texts), expected, atol=1e-5)


def halve_every_linear(model) -> None:
    """A quantizer for the test: each ``Linear``'s kernel runs the layer's own path, halved (an effect seen)."""
    from wde_core.plugin_api import Linear

    for module in model.modules():
        if isinstance(module, Linear):
            module.kernel = lambda x, residual=None, layer=module: layer.dense(x) * 0.5 + (
                0 if residual is None else residual)
    model.halved = True


HALVING = in_process(wde_select_quantization=lambda scheme, device, dtype: (
    "test_plugins:halve_every_linear", f"halved for the test ({scheme} on {device.type})") if scheme == "int8"
    else None)


def test_a_quantization_plugin_answers_and_its_function_converts_the_loaded_model(register_plugin, tiny_bert_dir,
                                                                                  monkeypatch):
    host = register_plugin(("halving", HALVING))  # registered last, asked first
    engine = Engine(str(tiny_bert_dir), quantization="int8")
    assert engine.pipeline.quantize == "test_plugins:halve_every_linear"
    assert engine.pipeline.reasons["quantization"] == "halved for the test (int8 on cpu)"
    assert engine.executor.worker.model.halved
    plain = Engine(str(tiny_bert_dir))
    assert not np.allclose(engine.encode("a halved model"), plain.encode("a halved model"), atol=1e-3)
    assert host.hook.wde_select_quantization(scheme="int8", device=torch.device("cuda"), dtype=torch.float16) == (
        "test_plugins:halve_every_linear", "halved for the test (int8 on cuda)")
    monkeypatch.setenv("WDE_PLUGINS", "wde-bert")  # wde-cpu-kernels (and the test plugin) left out
    register_plugin()
    with pytest.raises(ValueError, match=r"quantization='int8': no installed plugin provides it on cpu with "
                                         r"float32 \(wde-cpu-kernels provides 'int8' on CPU\)"):
        Engine(str(tiny_bert_dir), quantization="int8")


def test_the_cpu_policy_comes_from_one_hook_and_defaults_to_reading_no_cpu(register_plugin, tiny_bert_dir,
                                                                           monkeypatch):
    """A plugin's ``wde_get_cpu_policy`` answer reaches the dtype's reason and every ``Linear.prepack``; with no plugin
    answering (wde-cpu-kernels left out) the pipeline holds ``CpuPolicy()``: no note, bf16 weights left unpacked."""
    from wde_core.plugin_api import CpuPolicy, Linear

    told = CpuPolicy(bf16_note="; told by the test", onednn_dtypes=("float32",))
    register_plugin(("policy", in_process(wde_get_cpu_policy=lambda: told)))  # registered last, asked first
    engine = Engine(str(tiny_bert_dir), device="cpu", dtype="bfloat16")
    assert engine.pipeline.cpu is told and engine.pipeline.reasons["dtype"] == "engine argument dtype; told by the test"
    layers = [m for m in engine.executor.worker.model.modules() if isinstance(m, Linear)]
    assert layers and all(layer.packed_weight is None for layer in layers)  # bf16 is not among its oneDNN dtypes
    monkeypatch.setenv("WDE_PLUGINS", "wde-bert")
    register_plugin()
    default = assemble_pipeline(str(tiny_bert_dir), device="cpu", dtype="bfloat16")
    assert default.cpu == CpuPolicy() and default.reasons["dtype"] == "engine argument dtype"
