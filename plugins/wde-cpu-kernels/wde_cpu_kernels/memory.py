"""glibc's malloc kept from handing a batch's buffers back to the kernel between batches.

A CPU batch allocates and frees tensors of several megabytes in every layer (all-MiniLM-L6-v2, 4,000 tokens: 3-12
MB each). glibc serves blocks that large with ``mmap`` and returns them with ``munmap``, and trims the heap's top
past 128 KB, so every batch faults its buffers in again, page by page, zeroed by the kernel: 440,000-590,000 minor
faults and about 1 s of system time per encode of 2,000 wiki paragraphs in int8 (215,000 tokens), which oneDNN's
threads wait on. Raising the ``mmap`` threshold to glibc's largest (32 MB) and the trim threshold to 1 GB keeps
those blocks in the heap for the next batch: a few thousand faults, 1.08-1.12x faster in int8 (alternating runs,
Zen 5, 2 threads). The price: up to 1 GB of freed heap stays mapped to the process for reuse. vLLM's CPU backend
gets the same effect by preloading tcmalloc.

Applied once per process when an engine assembles a CPU pipeline (``plugin.wde_on_pipeline_assembled``); not where
the C library is not glibc, where ``MALLOC_MMAP_THRESHOLD_`` or ``MALLOC_TRIM_THRESHOLD_`` is set (the user's own
choice), or with ``WDE_MALLOC_TUNING=0``."""

from __future__ import annotations

import ctypes
import functools
import logging
import os

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters (malloc.h)
MMAP_THRESHOLD = 32 << 20  # glibc's largest (HEAP_MAX_SIZE / 2 on 64-bit)
TRIM_THRESHOLD = 1 << 30
logger = logging.getLogger(__name__)


@functools.lru_cache(maxsize=1)
def tune_malloc() -> str:
    """Set glibc's thresholds once per process; returns what was done, or why not."""
    if os.environ.get("WDE_MALLOC_TUNING", "1") == "0":
        return "not tuned: WDE_MALLOC_TUNING=0"
    if {"MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_"} & set(os.environ):
        return "not tuned: MALLOC_MMAP_THRESHOLD_ or MALLOC_TRIM_THRESHOLD_ is set"
    try:
        libc = ctypes.CDLL(None)
        mallopt, version = libc.mallopt, libc.gnu_get_libc_version
    except (OSError, AttributeError):
        return "not tuned: the C library is not glibc"
    version.restype = ctypes.c_char_p
    if not (mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) and mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD)):
        return f"not tuned: glibc {version().decode()} refused the thresholds"
    done = f"glibc {version().decode()}: mmap threshold {MMAP_THRESHOLD >> 20} MB, trim threshold {TRIM_THRESHOLD >> 20} MB"
    logger.info("malloc tuned for CPU batches: %s", done)
    return done
