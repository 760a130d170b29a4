"""``wde plugin new NAME --task TASK``: the generated distribution installs, wde lists its task, and its tests (the
task's scores against HF's last hidden states) pass; the plugin guide's worked example is this generated code."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from test_scaffold import ALLOWED_IMPORTS, declared_kind, non_blank_lines, registers_a_model, wde_imports
from wde_plugin_kit.scaffold import plugin, task_class

# the plugin guide's worked example, section 16: `wde plugin new wde-maxsim --task maxsim`
NAME, TASK, PACKAGE, ARCH = "wde-maxsim", "maxsim", "wde_maxsim", "MaxsimModel"
GUIDE = Path(__file__).resolve().parents[3] / "docs" / "plugin-guide.md"
GUIDE_SECTION = "## 16. A task with its own workflow: a worked example"


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    """The distribution written by ``wde plugin new wde-maxsim --task maxsim``."""
    root = tmp_path_factory.mktemp("scaffold-task")
    result = CliRunner().invoke(plugin, ["new", NAME, "--task", TASK, "--directory", str(root / NAME)])
    assert result.exit_code == 0, result.output
    assert f"next: edit {root / NAME / PACKAGE / 'tasks.py'} and {root / NAME / PACKAGE / 'output.py'}" in result.output
    return root / NAME


def test_writes_a_task_with_its_method_output_processor_workflow_and_link(generated):
    files = {str(p.relative_to(generated)) for p in generated.rglob("*") if p.is_file()}
    assert files == {"README.md", "pyproject.toml", f"{PACKAGE}/__init__.py", f"{PACKAGE}/plugin.py",
                     f"{PACKAGE}/tasks.py", f"{PACKAGE}/output.py", f"{PACKAGE}/model.py", "tests/test_task.py"}
    plugin_py = (generated / PACKAGE / "plugin.py").read_text()
    for hook in ("wde_register_tasks", "wde_register_output_processors", "wde_register_workflows",
                 "wde_register_architectures"):
        assert f"def {hook}(register):" in plugin_py, hook
    assert f'TASK = "{TASK}"' in plugin_py and f'"{PACKAGE}.tasks:{TASK}"' in plugin_py
    assert f'"{PACKAGE}.output:MaxsimOutputProcessor"' in plugin_py and f'architecture="{ARCH}"' in plugin_py
    assert "replace(EMBED_WORKFLOW, name=TASK, output_processor=TASK" in plugin_py
    assert f"def {TASK}(context, queries" in (generated / PACKAGE / "tasks.py").read_text()
    assert f'"{NAME}" = "{PACKAGE}.plugin"' in (generated / "pyproject.toml").read_text()
    # a task with its own workflow is a capability, but this one also registers its model: a family
    assert registers_a_model(generated / PACKAGE / "plugin.py") and declared_kind(generated) == "family"
    assert "{{" not in "".join(p.read_text() for p in generated.rglob("*") if p.is_file())
    for path in generated.rglob("*.py"):
        assert wde_imports(path) <= ALLOWED_IMPORTS, path


def test_the_guide_shows_the_generated_code(generated):
    """Every python block of the guide's worked example is the generated file it names, or a piece of it."""
    text = GUIDE.read_text(encoding="utf-8")
    assert GUIDE_SECTION in text
    section = text.split(GUIDE_SECTION, 1)[1].split("\n## ", 1)[0]
    assert f"wde plugin new {NAME} --task {TASK}" in section
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    shown = set()
    for block in blocks:
        first, _, body = block.partition("\n")
        match = re.fullmatch(r"# (wde_maxsim/\w+\.py)", first)
        assert match, f"a block of the worked example does not start with '# wde_maxsim/FILE.py': {first!r}"
        assert body.strip() and body in (generated / match.group(1)).read_text(), f"not in the generated {first}"
        shown.add(match.group(1))
    assert shown == {f"{PACKAGE}/plugin.py", f"{PACKAGE}/tasks.py", f"{PACKAGE}/output.py"}


def test_generated_task_plugin_installs_is_listed_and_its_tests_pass(generated, tmp_path):
    target = tmp_path / "site"
    # with build isolation, as a user builds it: pip fetches the build backend (flit_core) as for wde itself
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--quiet", "--target", str(target),
                    str(generated)], check=True, capture_output=True, text=True)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(target), os.environ.get("PYTHONPATH")])))
    # installed, its entry point loads it: `wde list-tasks` lists the task, its method and the architecture
    listed = subprocess.run([sys.executable, "-c", "from wde_core.cli.main import main; main()", "list-tasks",
                             "--json"], env=env, capture_output=True, text=True, timeout=120)
    assert listed.returncode == 0, listed.stderr
    data = json.loads(listed.stdout)
    assert data["problems"] == []
    row = {t["task"]: t for t in data["tasks"]}[TASK]
    assert (row["provider"], row["methods"], row["workflows"], row["served_by"]) == (NAME, [TASK], [TASK], [TASK])
    assert row["architectures"] == [{"architecture": ARCH, "task": TASK, "variant": "", "workflow": TASK,
                                     "provider": NAME}]
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider",
                          str(generated / "tests")], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=600)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert "4 passed" in run.stdout and "{'torch_sdpa': " in run.stdout and "{'eager': " in run.stdout
    code = sum(non_blank_lines(generated / PACKAGE / f) for f in ("plugin.py", "tasks.py", "output.py"))
    print(f"generated task plugin: plugin.py + tasks.py + output.py = {code} non-blank lines; "
          + " ".join(re.findall(r"\{'\w+': [\d.e-]+\}", run.stdout)))


def test_refuses_a_task_name_wde_cannot_serve(tmp_path):
    runner = CliRunner()
    for bad, why in (("Max-Sim", "cannot name a front-end method"), ("class", "cannot name a front-end method"),
                     ("prepare_x", "cannot name a front-end method"), ("encode", "'wde-core' already registers"),
                     ("embed", "'wde-core' already registers the task 'embed'"),
                     ("run", "already an attribute of Engine or AsyncEngine")):
        result = runner.invoke(plugin, ["new", NAME, "--task", bad, "--directory", str(tmp_path / "new")])
        assert result.exit_code == 2 and "Invalid value for '--task'" in result.output, (bad, result.output)
        assert why in result.output, (bad, result.output)
    result = runner.invoke(plugin, ["new", NAME, "--task", TASK, "--modality", "image",
                                    "--directory", str(tmp_path / "new")])
    assert result.exit_code == 2 and "does not combine with --modality image" in result.output
    assert not (tmp_path / "new").exists()


def test_an_architecture_other_plugins_link_gets_a_note(tmp_path):
    result = CliRunner().invoke(plugin, ["new", NAME, "--task", TASK, "-a", "BertModel", "-d", str(tmp_path / "x")])
    assert result.exit_code == 0, result.output
    assert "note: installed plugins also link BertModel for embed: an engine for such a model then needs " \
           "task='maxsim'" in result.output
    assert task_class("token_stats") == "TokenStats" and task_class("maxsim") == "Maxsim"
