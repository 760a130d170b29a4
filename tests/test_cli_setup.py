"""Quieter set-up (issue 15): ``bash .ci/run ARGS`` hands ARGS to nox, and building a project of the checkout
(``pip install .`` or ``./plugins/...``) leaves no ``build/`` or ``*.egg-info`` behind."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
IGNORED = shutil.ignore_patterns("__pycache__", "build", "*.egg-info")


def test_ci_run_hands_its_arguments_to_nox(tmp_path):
    (tmp_path / ".ci").mkdir()
    shutil.copy(ROOT / ".ci" / "run", tmp_path / ".ci" / "run")
    fakes, bin_ = tmp_path / "fakes", tmp_path / "bin"
    fakes.mkdir(), bin_.mkdir()
    (fakes / "pip").write_text("#!/bin/sh\necho pip \"$@\" >> \"$LOG\"\n")
    (fakes / "nox").write_text("#!/bin/sh\nprintf '%s\\n' \"$@\"\n")
    # python3 -m venv DIR: a "virtualenv" whose pip only logs and whose nox prints its arguments
    (bin_ / "python3").write_text(f"#!/bin/sh\necho python3 \"$@\" >> \"$LOG\"\nmkdir -p \"$3/bin\"\n"
                                  f"cp {fakes}/pip {fakes}/nox \"$3/bin/\"\n")
    for script in (fakes / "pip", fakes / "nox", bin_ / "python3"):
        script.chmod(0o755)
    env = {"PATH": f"{bin_}:/usr/bin:/bin", "LOG": str(tmp_path / "log")}
    for _ in range(2):
        run = subprocess.run(["bash", str(tmp_path / ".ci" / "run"), "-s", "tests", "--", "-k", "cli and io"],
                             capture_output=True, text=True, timeout=60, env=env)
        assert run.returncode == 0, run.stderr
        assert run.stdout.splitlines() == ["-s", "tests", "--", "-k", "cli and io"]
    # the virtualenv and nox are made on the first run only
    assert (tmp_path / "log").read_text().splitlines() == ["python3 -m venv .ci-venv",
                                                           "pip install -q -c constraints.txt nox"]
    assert "bash .ci/run -s tests" in (ROOT / "README.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("project", ["plugins/wde-reranker", "plugins/wde-plugin-kit", "."])
def test_building_a_project_of_the_checkout_leaves_it_clean(tmp_path, project):
    source = tmp_path / "source"
    if project == ".":
        source.mkdir()
        shutil.copytree(ROOT / "wde_core", source / "wde_core", ignore=IGNORED)
        for name in ("pyproject.toml", "README.md"):
            shutil.copy(ROOT / name, source / name)
    else:
        shutil.copytree(ROOT / project, source, ignore=IGNORED)
    before = sorted(str(p.relative_to(source)) for p in source.rglob("*"))
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path / "wheels"),
                            str(source)], capture_output=True, text=True, timeout=600)
    assert build.returncode == 0, build.stderr
    wheels = list((tmp_path / "wheels").glob("wde_*-0.1.0-py3-none-any.whl"))
    assert len(wheels) == 1
    if project == "plugins/wde-plugin-kit":  # the scaffold's templates and the tokenizers' text ship in the wheel
        names = set(zipfile.ZipFile(wheels[0]).namelist())
        assert {"wde_plugin_kit/english.txt", "wde_plugin_kit/templates/plugin/pyproject.toml.tmpl",
                "wde_plugin_kit/templates/plugin/tests/test_parity.py.tmpl"} <= names
    after = sorted(str(p.relative_to(source)) for p in source.rglob("*"))
    assert [p for p in after if p not in before] == []  # no build/, no *.egg-info
    gitignore = (ROOT / ".gitignore").read_text().splitlines()
    assert "build/" in gitignore and "*.egg-info/" in gitignore


@pytest.mark.parametrize("pyproject", sorted(str(p.relative_to(ROOT)) for p in ROOT.glob("plugins/*/pyproject.toml")))
def test_every_plugin_of_the_checkout_builds_out_of_tree(pyproject):
    text = (ROOT / pyproject).read_text(encoding="utf-8")
    setup_py = (ROOT / pyproject).with_name("setup.py")
    if 'build-backend = "setuptools.build_meta"' in text and setup_py.is_file():  # a compiled extension
        code = setup_py.read_text(encoding="utf-8")
        assert '"build_base"' in code and '"egg_base"' in code, (
            f"{setup_py}: a setuptools build must send build/ and *.egg-info out of the checkout")
        return
    assert 'build-backend = "flit_core.buildapi"' in text, (
        f"{pyproject}: setuptools writes build/ and *.egg-info into the checkout; build with flit_core")
