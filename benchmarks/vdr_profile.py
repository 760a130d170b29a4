"""bench-vdr's roofline (``--profile``): where each side's time goes, the FLOPs its GEMMs do (padding included,
read from the shapes the profiler records), this machine's fp32 GEMM peak at each of those shapes, and the bound
on wde's ratio if everything but its GEMMs took no time."""

from __future__ import annotations

import math
import time
from collections import defaultdict

import torch

from roofline import ATTENTION_OPS, GEMM_OPS

GEMMS = GEMM_OPS + ("aten::mkldnn_convolution",)  # transformers' patch embedding is a Conv3d (stride = kernel)


def gemm_shape(name: str, shapes: list) -> tuple[int, int, int] | None:
    """``(M, K, N)`` of one GEMM event from its input shapes, or ``None`` when it is not a leaf GEMM."""
    if "mkldnn::_linear_pointwise" in name:  # unary: (x, w, b, ...) with 6 inputs; binary: (x, other, w, b, ...)
        x, w = shapes[0], shapes[1] if len(shapes) == 6 else shapes[2]
        return math.prod(x[:-1]), x[-1], w[0]
    if name in ("aten::mm", "aten::addmm"):
        a, b = shapes[-2:] if name == "aten::mm" else shapes[1:3]
        return a[0], a[1], b[1]
    if name == "aten::bmm":
        return shapes[0][0] * shapes[0][1], shapes[0][2], shapes[1][2]
    if name == "aten::mkldnn_convolution":  # a patch embedding: one output position per patch
        x, w = shapes[0], shapes[1]
        return x[0], math.prod(w[1:]), w[0]
    return None


def kind_of(name: str) -> str:
    """``gemm``, ``attention`` or ``other`` (any other torch op)."""
    for kind, ops in (("gemm", GEMMS), ("attention", ATTENTION_OPS)):
        if any(op in name for op in ops):
            return kind
    return "other"


def profile_run(run) -> tuple[float, dict[str, float], dict[tuple[int, int, int], int]]:
    """One profiled ``run()``: wall seconds, self seconds by kind, and GEMM calls by ``(M, K, N)``."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        start = time.perf_counter()
        run()
        wall = time.perf_counter() - start
    shares: dict[str, float] = defaultdict(float)
    gemms: dict[tuple[int, int, int], int] = defaultdict(int)
    for event in prof.events():
        seconds = event.self_cpu_time_total / 1e6
        shares[kind_of(event.name)] += seconds
        shape = gemm_shape(event.name, event.input_shapes) if event.input_shapes else None
        if shape:
            gemms[shape] += 1
    shares["host"] = max(0.0, wall - sum(shares.values()))  # outside any torch op: Python, image preprocessing
    return wall, dict(shares), dict(gemms)


def gemm_peak(m: int, k: int, n: int, reps: int = 5) -> float:
    """This machine's fp32 GFLOP/s for ``[m, k] @ [k, n]`` (+ bias): the best of ``F.linear`` (as transformers
    calls it) and wde's prepacked ``Linear``, best of ``reps`` each."""
    from wde_core.plugin_api import Linear

    x, layer = torch.randn(m, k), Linear(k, n).eval().requires_grad_(False)
    with torch.inference_mode():
        plain = best_seconds(lambda: torch.nn.functional.linear(x, layer.weight, layer.bias), reps)
        layer.prepack()
        packed = best_seconds(lambda: layer(x), reps)
    return 2.0 * m * k * n / min(plain, packed) / 1e9


def best_seconds(fn, reps: int) -> float:
    """The fastest of ``reps`` calls of ``fn`` after one warm-up call."""
    fn()
    best = math.inf
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def weight_peaks(profiles: dict) -> dict[tuple[int, int], tuple[int, float]]:
    """Per weight shape ``(K, N)``: the largest row count either side ran it at, and the peak GFLOP/s there."""
    rows: dict[tuple[int, int], int] = {}
    for _, _, gemms in profiles.values():
        for m, k, n in gemms:
            rows[(k, n)] = max(rows.get((k, n), 0), m)
    return {(k, n): (m, gemm_peak(m, k, n)) for (k, n), m in rows.items()}


def gemm_flops(gemms: dict, peaks: dict | None = None) -> float:
    """FLOPs of ``gemms`` (calls by ``(M, K, N)``); with ``peaks``, the seconds they take at the peak instead."""
    return sum(2.0 * m * k * n * calls / (peaks[(k, n)][1] * 1e9 if peaks else 1.0)
               for (m, k, n), calls in gemms.items())


def side_line(kind: str, name: str, profiled: tuple, peaks: dict, items: int) -> str:
    """One side's time per item by part, its GEMM FLOPs per item, rate, share of the peak and GEMM-only limit."""
    wall, shares, gemms = profiled
    gemm_s, limit = max(shares.get("gemm", 0.0), 1e-9), gemm_flops(gemms, peaks)
    split = ", ".join(f"{part} {1e3 * shares.get(part, 0.0) / items:.0f} ms ({100 * shares.get(part, 0.0) / wall:.0f}%)"
                      for part in ("gemm", "attention", "other", "host"))
    return (f"  {kind} {name}: {1e3 * wall / items:.0f} ms per item (profiled): {split}; GEMMs "
            f"{gemm_flops(gemms) / items / 1e9:.1f} GFLOP per item at {gemm_flops(gemms) / gemm_s / 1e9:.0f} GFLOP/s, "
            f"{100 * limit / gemm_s:.0f}% of the peak at their shapes (GEMM-only limit {1e3 * limit / items:.0f} ms "
            f"per item)")


def report_profile(kind: str, runners: dict, items: int) -> None:
    """Print the peaks per weight shape, each side's time split and GEMM rate, and the bound on the ratio."""
    profiles = {name: profile_run(lambda run=run: run()) for name, run in runners.items()}
    peaks = weight_peaks(profiles)
    print(f"  {kind}: fp32 GEMM peak per weight shape (K x N at M rows: GFLOP/s): " + ", ".join(
        f"{k}x{n}@{m}: {peak:.0f}" for (k, n), (m, peak) in sorted(peaks.items())))
    for name, profiled in profiles.items():
        print(side_line(kind, name, profiled, peaks, items))
    (wde_wall, wde_shares, wde_gemms), hf_wall = profiles["wde"], profiles["transformers"][0]
    print(f"  {kind} bound: wde with zero non-GEMM time, GEMMs at their measured rate: "
          f"{hf_wall / max(wde_shares.get('gemm', 0.0), 1e-9):.2f}x transformers' profiled time; GEMMs at the peak "
          f"too: {hf_wall / gemm_flops(wde_gemms, peaks):.2f}x (profiled ratio {hf_wall / wde_wall:.2f}x)", flush=True)
