"""Registers the ``cpu_varlen`` attention backend and picks it on CPU where it serves the dtype."""

from __future__ import annotations

from wde_core.plugin_api import hookimpl


@hookimpl
def wde_register_attention_backends(register):
    """wde's AVX-512 varlen kernel."""
    register("cpu_varlen", "wde_cpu_kernels.attention:NativeCpuAttention", "wde's AVX-512 varlen kernel, CPU only")


@hookimpl
def wde_select_attention_backend(device, dtype, causal):
    """``cpu_varlen`` on CPU in float32, and in bfloat16 where the CPU has AVX512-BF16, when it builds; else
    ``torch_sdpa`` with the reason; no opinion off the CPU or in other dtypes."""
    import torch

    if device.type != "cpu" or dtype not in (torch.float32, torch.bfloat16):
        return None
    from wde_cpu_kernels.attention import cpu_varlen_refusal

    named, refusal = str(dtype).replace("torch.", ""), cpu_varlen_refusal(dtype)
    if refusal is None:
        return "cpu_varlen", f"auto: wde's AVX-512 varlen kernel on cpu with {named}"
    return "torch_sdpa", f"auto: torch_sdpa on cpu with {named} (cpu_varlen: {refusal})"
