"""The roofline part of bench-cpu: the GEMM peak at the model's own shapes (wde's prepacked ``Linear``, per dtype),
the GEMM-only limit in tokens/s it implies, and where wde's time goes (a torch profile of one encode)."""

from __future__ import annotations

import time
from collections import defaultdict

import torch

GEMM_OPS = ("mkldnn::_linear_pointwise", "onednn::qlinear_pointwise", "aten::addmm", "aten::mm", "aten::linear", "aten::matmul", "aten::bmm")
ATTENTION_OPS = ("scaled_dot_product", "flash_attention", "aten::softmax", "aten::baddbmm", "wde::varlen_attention")
NORM_OPS = ("layer_norm", "rms_norm")
QUANTIZE_OPS = ("wde::int8_",)  # wde-cpu-kernels' compiled (de)quantization, named while a profiler records


def layer_shapes(config) -> list[tuple[int, int]]:
    """``(in, out)`` of each linear layer of one BERT-style block: fused QKV, attention output, FFN in and out."""
    h, i = config.hidden_size, config.intermediate_size
    return [(h, 3 * h), (h, h), (h, i), (i, h)]


def gemm_peak_at_shapes(config, dtype: torch.dtype, tokens: int = 4096, reps: int = 10, int8: bool = False) -> float:
    """GFLOP/s of wde's prepacked ``Linear`` over ``tokens`` rows at the block's shapes, FLOP-weighted (best of
    ``reps`` per shape); the activation epilogue of the FFN-in layer included, as the model runs it. ``int8``:
    every layer through wde-cpu-kernels' int8 kernel as the model runs it (the down projection per token;
    activation quantization included), ``dtype`` around it."""
    from wde_core.plugin_api import Linear
    from wde_cpu_kernels.cpu import cpu_policy  # the CPU policy an engine's layers are prepacked under

    flops, seconds = 0.0, 0.0
    for n_in, n_out in layer_shapes(config):
        act = config.hidden_act if n_out == config.intermediate_size else None
        layer = Linear(n_in, n_out, activation=act).to(dtype).eval().requires_grad_(False)
        layer.prepack(cpu_policy())
        if int8:
            from wde_cpu_kernels.int8 import Int8Kernel, PerTokenInt8Kernel, per_token

            layer.kernel = PerTokenInt8Kernel(layer) if per_token(layer) else Int8Kernel(layer)
            layer.kernel.float_below = 0  # the int8 GEMM's peak, wherever the CPU's rule would run float
        x = torch.randn(tokens, n_in, dtype=dtype)
        with torch.inference_mode():
            layer(x)
            best = min(_time(lambda: layer(x)) for _ in range(reps))
        flops += 2.0 * tokens * n_in * n_out
        seconds += best
    return flops / seconds / 1e9


def _time(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def time_shares(engine, texts: list[str]) -> dict[str, float]:
    """Seconds of one ``encode(texts)`` by kind: gemm, attention, norms, int8 (de)quantization, other ops, and host
    (the rest of the wall time: tokenization, scheduling, batching, pooling glue and Python), from the profiler's
    self CPU times."""
    from torch.profiler import ProfilerActivity, profile

    engine.encode(texts[:32])
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        start = time.perf_counter()
        engine.encode(texts)
        wall = time.perf_counter() - start
    shares: dict[str, float] = defaultdict(float)
    for event in prof.key_averages():
        shares[_kind(event.key)] += event.self_cpu_time_total / 1e6
    shares["host"] = max(0.0, wall - sum(shares.values()))
    shares["wall"] = wall
    return dict(shares)


def _kind(name: str) -> str:
    for kind, ops in (("gemm", GEMM_OPS), ("attention", ATTENTION_OPS), ("norms", NORM_OPS),
                      ("quantize", QUANTIZE_OPS)):
        if any(op in name for op in ops):
            return kind
    return "other"


def report_roofline(name: str, tokens_per_s: float, flops_per_token: float, peak: float, shares: dict) -> None:
    """One line per engine: tokens/s, achieved GEMM GFLOP/s, the GEMM-only limit and the fraction reached."""
    limit = peak * 1e9 / flops_per_token
    wall = shares["wall"]
    gemm_rate = flops_per_token * tokens_per_s * wall / max(shares.get("gemm", 0.0), 1e-9) / 1e9
    split = ", ".join(f"{kind} {100 * shares.get(kind, 0.0) / wall:.0f}%"
                      for kind in ("gemm", "attention", "norms", "quantize", "other", "host"))
    print(f"{name}: {tokens_per_s:.0f} tokens/s; GEMMs at {gemm_rate:.0f} GFLOP/s (peak at the model's shapes "
          f"{peak:.0f}); GEMM-only limit {limit:.0f} tokens/s, reached {100 * tokens_per_s / limit:.0f}%; time: {split}")
