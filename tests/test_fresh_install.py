"""A fresh virtualenv with only wde-core and wde-bert (no wde-cpu-kernels): it installs without a compiler or ninja
being asked for, `wde inspect` picks torch_sdpa and says why, and the default model embeds (slow tier: it installs
torch and wde's dependencies into a new virtualenv)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


def run(*command: str, cwd: Path = ROOT, timeout: int = 900) -> str:
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "VIRTUAL_ENV")}
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)
    assert done.returncode == 0, f"{' '.join(command)}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def test_core_and_bert_alone_use_torch_sdpa_and_compile_nothing(tmp_path):
    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", str(venv))
    # one install, as the README's quick start; --no-compile: byte-compiling torch, transformers, scipy, ... at
    # install (pip's default, and what PIP_NO_COMPILE=1 asks for: pip reads it as --compile) doubles its time here,
    # for two processes that import a fraction of them
    run(str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-compile", "-c", str(ROOT / "constraints.txt"),
        "torch==2.13.0", ".", "./plugins/wde-bert[default-model]")
    installed = run(str(venv / "bin" / "python"), "-m", "pip", "list", "--format=json")
    names = {package["name"].lower() for package in json.loads(installed)}
    assert {"wde-core", "wde-bert"} <= names and not names & {"wde-cpu-kernels", "ninja"}, sorted(names)
    report = json.loads(run(str(venv / "bin" / "wde"), "inspect", "--json", cwd=tmp_path))
    assert report["stages"]["attention_backend"]["component"] == "torch_sdpa", report
    assert "torch_sdpa" in report["reasons"]["attention_backend"], report
    script = ("from wde_core import Engine; e = Engine(); v = e.encode('Hello, world'); "
              "print(e.pipeline.components['attention_backend'].name, v.shape)")
    out = run(str(venv / "bin" / "python"), "-c", script, cwd=tmp_path)
    assert out.split() == ["torch_sdpa", "(384,)"], out
