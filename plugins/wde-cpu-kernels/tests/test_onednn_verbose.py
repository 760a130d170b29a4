"""oneDNN's own report (ONEDNN_VERBOSE) of what the int8 layers run: a JIT kernel, never its reference one, on every
int8 ISA and under an ISA cap; and no new primitive for batches whose padded row counts it has seen."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from kernel_builds import int8_past_float_rows, needs_kernel, runs  # noqa: F401 - an autouse fixture


ONEDNN_PROBE = """
import torch
from wde_core.plugin_api import Linear
from wde_cpu_kernels.int8 import Int8Kernel, PerTokenInt8Kernel
for dtype in (torch.float32, torch.bfloat16):
    for activation, residual in ((None, None), ("gelu", None), (None, torch.randn(256, 384, dtype=dtype))):
        layer = Linear(384, 384, activation=activation).to(dtype).eval()
        layer.kernel = Int8Kernel(layer)
        with torch.inference_mode():
            layer(torch.randn(256, 384, dtype=dtype), residual)
    down = Linear(1536, 384).to(dtype).eval()
    down.kernel = PerTokenInt8Kernel(down)
    with torch.inference_mode():
        down(torch.randn(256, 1536, dtype=dtype))
"""


@needs_kernel
@pytest.mark.parametrize("isa_cap", [None, "AVX512_CORE_BF16"])
def test_onednn_runs_a_jit_int8_kernel_not_its_reference_one(isa_cap):
    """oneDNN's own report of the implementation it ran: int8 activations against torch's prepacked weights fell to
    ``ref_int8`` (about 1,000x slower) on a Zen 5 without AMX; the uint8 form runs brgemm on every int8 ISA, and int8
    activations (taken only where the CPU has AMX-INT8) run brgemm there. Each kind of layer, in both dtypes; and
    under an ISA cap that keeps oneDNN off AMX, no AMX kernel (and no reference one) on any CPU."""
    env = {**os.environ, "ONEDNN_VERBOSE": "1", **({"ONEDNN_MAX_CPU_ISA": isa_cap} if isa_cap else {})}
    run = subprocess.run([sys.executable, "-c", ONEDNN_PROBE], capture_output=True, text=True, timeout=300, env=env)
    assert run.returncode == 0, run.stderr
    matmuls = [line.split(",")[6] for line in run.stdout.splitlines() if ",exec,cpu,matmul," in line]
    assert len(matmuls) == 8 and not any(impl.startswith("ref") for impl in matmuls), matmuls
    if runs("AVX512"):  # AVX2 CPUs run oneDNN's gemm:jit for them (a bf16 output there fell to ref_int8: float32 now)
        assert all(impl.startswith("brg_matmul") for impl in matmuls), matmuls
    if isa_cap:
        assert not any("amx" in impl for impl in matmuls), matmuls


PRIMITIVE_PROBE = """
import torch
from wde_core.plugin_api import Linear
from wde_cpu_kernels.int8 import Int8Kernel, PerTokenInt8Kernel
qkv, down = Linear(384, 1152).bfloat16().eval(), Linear(1536, 384).bfloat16().eval()
qkv.kernel, down.kernel = Int8Kernel(qkv), PerTokenInt8Kernel(down)
with torch.inference_mode():
    for rows, outliers in ((4000, 50), (4010, 55), (4030, 60)):  # one bucket of 64 rows, one of 16 outlier rows
        x = torch.randn(rows, 384).bfloat16()
        x[:outliers] *= 20
        qkv(x)
        down(torch.randn(rows, 1536).bfloat16())
        print("BATCH", flush=True)
"""


@needs_kernel
def test_batches_of_nearby_sizes_reuse_onednns_primitives():
    """oneDNN's own report: a batch of 4,000 rows (50 outliers) builds the int8 and bf16 primitives, batches of 4,010
    and 4,030 rows (55 and 60 outliers) build none, as their padded row counts are the first's (a miss costs
    0.4-1.3 ms on a Xeon, 9% of a first pass over 2,000 paragraphs)."""
    run = subprocess.run([sys.executable, "-c", PRIMITIVE_PROBE], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "ONEDNN_VERBOSE": "2"})
    assert run.returncode == 0, run.stderr
    batches = run.stdout.split("BATCH")[:3]
    misses = [[line for line in batch.splitlines() if "create:cache_miss" in line and ("matmul" in line or
               "inner_product" in line)] for batch in batches]
    from wde_cpu_kernels.cpu import onednn_takes

    # QKV's and the down projection's int8 matmuls, the outliers' bf16 one (torch's own bf16 product where oneDNN has
    # no bf16 on this CPU: AVX2 only)
    assert len(misses[0]) >= (3 if onednn_takes(torch.bfloat16) else 2), misses[0]
    assert misses[1] == [] and misses[2] == [], misses[1:]
