"""``wde plugin new``: the generated distribution installs, and its parity test passes on a BERT-shaped example."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from wde_plugin_kit.scaffold import default_architecture, package_name, plugin

NAME, ARCH, PACKAGE = "wde-scaffold-demo", "ScaffoldDemoModel", "wde_scaffold_demo"
ALLOWED_IMPORTS = {"wde_core.plugin_api", "wde_plugin_kit"}


def non_blank_lines(path) -> int:
    """Lines of ``path`` that are not blank."""
    return sum(1 for line in path.read_text(encoding="utf-8").splitlines() if line.strip())


def wde_imports(path) -> set[str]:
    """Every ``wde_core`` or ``wde_plugin_kit`` module that ``path`` imports."""
    found, ours = set(), {"wde_core", "wde_plugin_kit"}
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.split(".")[0] in ours}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in ours:
            found.add(node.module)
    return found


def declared_kind(generated) -> str | None:
    """``[tool.wde] kind`` of the generated ``pyproject.toml`` (what tests/test_plugin_depth.py reads)."""
    import tomllib

    return tomllib.loads((generated / "pyproject.toml").read_text()).get("tool", {}).get("wde", {}).get("kind")


def registers_a_model(plugin_py: Path) -> bool:
    """Whether the generated hook module links an architecture to a model class of its own package."""
    tree = ast.parse(plugin_py.read_text(encoding="utf-8"))
    hooks = {node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)}
    models = [kw.value.value for node in ast.walk(tree) if isinstance(node, ast.Call)
              for kw in node.keywords if kw.arg == "model" and isinstance(kw.value, ast.Constant)]
    return "wde_register_architectures" in hooks and any(m.startswith(f"{plugin_py.parent.name}.") for m in models)


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    """The distribution written by ``wde plugin new wde-scaffold-demo --architecture ScaffoldDemoModel``."""
    root = tmp_path_factory.mktemp("scaffold")
    result = CliRunner().invoke(plugin, ["new", NAME, "--architecture", ARCH, "--directory", str(root / NAME)])
    assert result.exit_code == 0, result.output
    return root / NAME


def test_writes_the_distribution(generated):
    files = {str(p.relative_to(generated)) for p in generated.rglob("*") if p.is_file()}
    assert files == {"README.md", "pyproject.toml", f"{PACKAGE}/__init__.py", f"{PACKAGE}/model.py",
                     f"{PACKAGE}/plugin.py", "tests/test_parity.py"}
    pyproject = (generated / "pyproject.toml").read_text()
    assert f'name = "{NAME}"' in pyproject and '"wde-core>=0.1.0"' in pyproject
    assert 'test = ["pytest>=8", "wde-plugin-kit>=0.1.0"]' in pyproject
    assert f'"{NAME}" = "{PACKAGE}.plugin"' in pyproject
    plugin_py = (generated / PACKAGE / "plugin.py").read_text()
    assert f'architecture="{ARCH}"' in plugin_py and f'model="{PACKAGE}.model:{ARCH}"' in plugin_py
    # a model of its own makes it a family (docs/plugin-guide.md, "Shallow dependencies")
    assert registers_a_model(generated / PACKAGE / "plugin.py") and declared_kind(generated) == "family"
    assert "{{" not in "".join(p.read_text() for p in generated.rglob("*") if p.is_file())


def test_builds_with_the_backend_wde_itself_uses(generated):
    tomllib = pytest.importorskip("tomllib")
    ours = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())["build-system"]
    theirs = tomllib.loads((generated / "pyproject.toml").read_text())
    assert theirs["build-system"] == ours and ours["build-backend"] == "flit_core.buildapi"
    assert theirs["tool"]["flit"]["module"]["name"] == PACKAGE


def test_generated_code_imports_only_the_plugin_api_and_the_testing_kit(generated):
    for path in generated.rglob("*.py"):
        assert wde_imports(path) <= ALLOWED_IMPORTS, path


def test_generated_plugin_installs_and_its_parity_test_passes(generated, tmp_path):
    target = tmp_path / "site"
    # with build isolation, as a user builds it: pip fetches the build backend (flit_core) as for wde itself
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--quiet", "--target", str(target),
                    str(generated)], check=True, capture_output=True, text=True)
    assert (target / PACKAGE / "model.py").is_file()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(target), os.environ.get("PYTHONPATH")])))
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(generated / "tests")],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert "1 passed" in run.stdout
    code = non_blank_lines(generated / PACKAGE / "plugin.py") + non_blank_lines(generated / PACKAGE / "model.py")
    test = non_blank_lines(generated / "tests" / "test_parity.py")
    print(f"generated plugin: plugin.py + model.py = {code} non-blank lines; tests/test_parity.py = {test}")


def test_refuses_an_existing_directory_and_a_bad_name(tmp_path):
    runner = CliRunner()
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "file.txt").write_text("x")
    result = runner.invoke(plugin, ["new", NAME, "--directory", str(tmp_path / "taken")])
    assert result.exit_code == 2 and "--directory" in result.output and "already exists" in result.output
    for bad in ("bad name!", "wde-", "1st-plugin", "wde-ü"):
        result = runner.invoke(plugin, ["new", bad, "--directory", str(tmp_path / "new")])
        assert result.exit_code == 2 and "Invalid value for NAME" in result.output, (bad, result.output)
    result = runner.invoke(plugin, ["new", NAME, "--architecture", "Not-An-Identifier",
                                    "--directory", str(tmp_path / "new")])
    assert result.exit_code == 2 and "--architecture" in result.output
    assert not (tmp_path / "new").exists()


def test_defaults_come_from_the_name(tmp_path, monkeypatch):
    assert default_architecture("wde-foo") == "FooModel" and default_architecture("wde_my.bert") == "MyBertModel"
    assert package_name("wde-Foo.bar") == "wde_foo_bar"
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(plugin, ["new", "wde-foo"])
    assert result.exit_code == 0, result.output
    assert 'architecture="FooModel"' in (tmp_path / "wde-foo" / "wde_foo" / "plugin.py").read_text()


def test_the_wde_command_serves_the_plugin_group(tmp_path):
    run = subprocess.run([sys.executable, "-c", "from wde_core.cli.main import main; main()", "plugin", "new",
                          "wde-cli-demo", "--directory", str(tmp_path / "demo")],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    assert (tmp_path / "demo" / "wde_cli_demo" / "model.py").is_file()


def test_without_the_kit_wde_plugin_names_the_distribution_that_provides_it(tmp_path):
    env = {**os.environ, "WDE_PLUGINS": "wde-bert"}
    run = subprocess.run([sys.executable, "-c", "from wde_core.cli.main import main; main()", "plugin", "new", "wde-x",
                          "--directory", str(tmp_path / "x")], capture_output=True, text=True, timeout=120, env=env)
    assert run.returncode == 1 and not (tmp_path / "x").exists()
    assert ("wde plugin is provided by the wde-plugin-kit plugin, installed but left out by WDE_PLUGINS='wde-bert'"
            in run.stderr), run.stderr


# --- --modality image: a vision tower on wde-clip's image-text workflow (issue 25) ---------------------------------
VISION, VISION_ARCH, VISION_PACKAGE = "wde-vision-demo", "VisionDemoModel", "wde_vision_demo"


@pytest.fixture(scope="module")
def generated_vision(tmp_path_factory):
    """The distribution written by ``wde plugin new wde-vision-demo --modality image -a VisionDemoModel``."""
    root = tmp_path_factory.mktemp("scaffold-image")
    result = CliRunner().invoke(plugin, ["new", VISION, "--modality", "image", "--architecture", VISION_ARCH,
                                         "--directory", str(root / VISION)])
    assert result.exit_code == 0, result.output
    return root / VISION


def test_image_modality_writes_a_vision_tower_on_the_image_text_workflow(generated_vision):
    files = {str(p.relative_to(generated_vision)) for p in generated_vision.rglob("*") if p.is_file()}
    assert files == {"README.md", "pyproject.toml", f"{VISION_PACKAGE}/__init__.py", f"{VISION_PACKAGE}/model.py",
                     f"{VISION_PACKAGE}/plugin.py", "tests/test_parity.py"}
    assert '"wde-core>=0.1.0", "wde-clip>=0.1.0"' in (generated_vision / "pyproject.toml").read_text()
    plugin_py = (generated_vision / VISION_PACKAGE / "plugin.py").read_text()
    assert f'architecture="{VISION_ARCH}"' in plugin_py and 'IMAGE_TEXT_WORKFLOW = "image-text"' in plugin_py
    assert f'model="{VISION_PACKAGE}.model:{VISION_ARCH}"' in plugin_py
    assert registers_a_model(generated_vision / VISION_PACKAGE / "plugin.py")
    assert declared_kind(generated_vision) == "family"
    assert "from wde_clip.public import ImageTextBatch" in (generated_vision / VISION_PACKAGE / "model.py").read_text()
    assert "{{" not in "".join(p.read_text() for p in generated_vision.rglob("*") if p.is_file())
    for path in generated_vision.rglob("*.py"):
        assert wde_imports(path) <= ALLOWED_IMPORTS, path


def test_generated_vision_plugin_loads_without_torch_and_its_parity_test_passes(generated_vision, tmp_path):
    pytest.importorskip("wde_clip")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(generated_vision),
                                                                    os.environ.get("PYTHONPATH")])))
    check = (f"import sys, {VISION_PACKAGE}.plugin as p; assert 'torch' not in sys.modules; "
             "from wde_clip.public import IMAGE_TEXT_WORKFLOW as w; assert p.IMAGE_TEXT_WORKFLOW == w.name, w.name")
    subprocess.run([sys.executable, "-c", check], env=env, check=True, capture_output=True, timeout=120)
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider",
                          str(generated_vision / "tests")], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=600)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert "2 passed" in run.stdout and "{'torch_sdpa': " in run.stdout and "{'eager': " in run.stdout
