"""glibc's malloc tuned when an engine assembles a CPU pipeline (wde_cpu_kernels.memory): measured by the page
faults of reusing a freed 16 MB buffer, in fresh processes with and without the tuning."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="the tuning is glibc's (hardware/OS)")

REUSE = """
import resource, torch
from wde_core import Engine
engine = Engine({model!r}, device="cpu")
from wde_cpu_kernels.memory import tune_malloc
print(tune_malloc())
torch.ones(4 << 20).sum()  # 16 MB, allocated, written and freed
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
torch.ones(4 << 20).sum()  # the same size again
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def reuse_faults(model, **env) -> tuple[str, int]:
    """What ``tune_malloc`` reported, and the minor page faults of allocating a freed 16 MB buffer again."""
    done = subprocess.run([sys.executable, "-c", REUSE.format(model=str(model))], capture_output=True, text=True,
                          timeout=300, env={**{k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")},
                                            **env})
    assert done.returncode == 0, done.stderr[-2000:]
    report, faults = done.stdout.splitlines()[-2:]
    return report, int(faults)


def test_a_cpu_engine_keeps_freed_batch_buffers_in_the_heap(tiny_bert_dir):
    """Tuned, the second 16 MB buffer reuses the first's pages; untuned, glibc unmaps it and faults its 4,096 pages in again (3,969 seen: some come pre-faulted)."""
    report, tuned = reuse_faults(tiny_bert_dir)
    assert report.startswith("glibc ") and "mmap threshold 32 MB, trim threshold 1024 MB" in report
    assert tuned < 256
    report, untuned = reuse_faults(tiny_bert_dir, WDE_MALLOC_TUNING="0")
    assert report == "not tuned: WDE_MALLOC_TUNING=0"
    assert untuned >= 2048


def test_the_users_own_malloc_settings_are_left_alone(tiny_bert_dir):
    report, _ = reuse_faults(tiny_bert_dir, MALLOC_TRIM_THRESHOLD_="131072")
    assert report == "not tuned: MALLOC_MMAP_THRESHOLD_ or MALLOC_TRIM_THRESHOLD_ is set"
