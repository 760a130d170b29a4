"""bfloat16 on CPU: ``wde inspect`` says what it would give on this CPU, and its accuracy against float32."""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner

from conftest import cosines, minilm_path, proc_cpuinfo_flags
from wde_core import Engine
from wde_core.cli.main import cli


def test_inspect_says_what_bfloat16_would_give_on_this_cpu(isolated_host):
    isolated_host.register_commands(cli)
    out = CliRunner().invoke(cli, ["inspect", "--device", "cpu"])
    assert out.exit_code == 0, out.output
    line = next(x for x in out.output.splitlines() if x.strip().startswith("dtype:"))
    flags = proc_cpuinfo_flags()
    native = "amx_bf16" in flags or "avx512_bf16" in flags
    assert "dtype='bfloat16'" in line and ("AMX-BF16" in line or "AVX512-BF16" in line), line
    assert ("emulated" in line) != native, line  # without bf16 arithmetic the note says to keep float32
    explicit = CliRunner().invoke(cli, ["inspect", "--device", "cpu", "--dtype", "bfloat16"])
    chosen = next(x for x in explicit.output.splitlines() if x.strip().startswith("dtype:"))
    assert "bfloat16   (engine argument dtype; this CPU has" in chosen, explicit.output
    assert ("emulated" in chosen) != native, chosen
    as_float32 = CliRunner().invoke(cli, ["inspect", "--device", "cpu", "--dtype", "float32"])
    assert "float32   (engine argument dtype)" in as_float32.output, as_float32.output


@pytest.mark.slow
def test_bfloat16_stays_within_the_stated_tolerance_on_2000_wiki_paragraphs(minilm_corpus):
    """Against float32 as sentence-transformers computes it (the root conftest's reference, shared with the corpus
    check, which holds wde's float32 to it within cosine 0.99999)."""
    texts, reference = minilm_corpus
    with Engine(str(minilm_path()), device="cpu", dtype="bfloat16") as bf16:
        low = bf16.encode(texts)
    cosine = cosines(reference, low)
    print(f"bf16 vs fp32 on {len(texts)} paragraphs: min cosine {cosine.min():.6f}, median {np.median(cosine):.6f}")
    assert cosine.min() >= 0.9995
