"""Registers the ``cpu_varlen`` attention backend and picks it on CPU where it serves the dtype; provides
``quantization="int8"`` on CPU (``wde_cpu_kernels.int8``); answers the core's CPU policy (``wde_cpu_kernels.cpu``);
tunes glibc's malloc for CPU batches (``wde_cpu_kernels.memory``)."""

from __future__ import annotations

import logging

from wde_core.plugin_api import hookimpl


@hookimpl
def wde_register_attention_backends(register):
    """wde's varlen kernel (AVX-512, or AVX2 where the CPU has no AVX-512)."""
    register("cpu_varlen", "wde_cpu_kernels.attention:NativeCpuAttention",
             "wde's varlen kernel (AVX-512 or AVX2), CPU only")


@hookimpl
def wde_select_attention_backend(device, dtype, causal):
    """``cpu_varlen`` on CPU in float32 and bfloat16 (products by AMX tiles where the CPU has AMX-BF16, by AVX512-BF16
    where it has that, else in fp32), when it loads; else ``torch_sdpa`` with the reason; no opinion off the CPU or
    in other dtypes."""
    import torch

    if device.type != "cpu" or dtype not in (torch.float32, torch.bfloat16):
        return None
    from wde_cpu_kernels.attention import bf16_products, cpu_varlen_refusal

    named, refusal = str(dtype).replace("torch.", ""), cpu_varlen_refusal(dtype)
    if refusal is None:
        products = f" (products by {bf16_products()})" if dtype == torch.bfloat16 else ""
        from wde_cpu_kernels.attention import kernel_isa

        return "cpu_varlen", f"auto: wde's {kernel_isa()} varlen kernel on cpu with {named}{products}"
    return "torch_sdpa", f"auto: torch_sdpa on cpu with {named} (cpu_varlen: {refusal})"


@hookimpl
def wde_select_quantization(scheme, device, dtype):
    """``int8`` on CPU (any model dtype): oneDNN int8 GEMMs for the ``Linear`` layers of the transformer blocks."""
    if scheme != "int8" or device.type != "cpu":
        return None
    from wde_cpu_kernels.int8 import ALWAYS_FLOAT, float_below_rows, float_rows_note, int8_supported

    refusal = int8_supported()
    if refusal is not None:
        raise ValueError(f"engine argument quantization='int8': {refusal}")
    named = str(dtype).replace("torch.", "")
    note = float_rows_note(named)
    if float_below_rows() >= ALWAYS_FLOAT:
        logging.getLogger(__name__).warning("quantization='int8':%s", note[1:])
    return ("wde_cpu_kernels.int8:quantize_model",
            "int8 (wde-cpu-kernels): the transformer blocks' linear layers as oneDNN int8 GEMMs, weights per output "
            "channel, activations per batch (outlier rows in the model dtype), dequantized with bias/activation/residual "
            "in the epilogue; down projections (more inputs than outputs, the FFN's) with activations per token; "
            f"attention, norms, pooling and the heads outside the blocks (pooler, classifier, projections) in {named}"
            + note)


@hookimpl
def wde_get_cpu_policy():
    """This CPU's policy for the core's layers, read off /proc/cpuinfo and torch's oneDNN (``cpu.cpu_policy``)."""
    from wde_cpu_kernels.cpu import cpu_policy

    return cpu_policy()


@hookimpl
def wde_on_pipeline_assembled(pipeline):
    """On CPU, glibc's malloc keeps a batch's multi-megabyte buffers for the next batch (``wde_cpu_kernels.memory``)."""
    if pipeline.device.type == "cpu":
        from wde_cpu_kernels.memory import tune_malloc

        tune_malloc()
