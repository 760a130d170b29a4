"""``cpu_varlen``: wde's own CPU attention kernel (``csrc/``), varlen attention straight over the packed
batch: no padded block, no mask tensor, scores and softmax in a per-thread buffer; fp32 arithmetic (bf16 rows widened
as the kernel packs them), and for bf16 on AMD CPUs with AVX512-BF16 pair dot products (``varlen_attention_bf16.cpp``),
or AMX tile products where the CPU has AMX-BF16 and the head size is a multiple of 32 (``varlen_attention_amx.cpp``);
see ``bf16_products``. Two builds of the module: ``_varlen`` in AVX-512 (with the bf16 and AMX paths) and
``_varlen_avx2`` in AVX2 + FMA for CPUs without AVX-512 (AMD Zen 1-3, Intel client cores; fp32 arithmetic only),
each with the int8 row kernels (``int8.py``) and LayerNorm; ``varlen_kernel`` loads the one this CPU runs.
Compiled when the distribution is installed (``setup.py``), so nothing is built at run time. Where neither can be
used (no AVX2, a module that does not load, ``WDE_NATIVE_ATTENTION=0``), CPU pipelines use ``torch_sdpa`` and
``wde inspect`` says why."""

from __future__ import annotations

import functools
import importlib
import logging
import os
from dataclasses import dataclass, field

import torch

from wde_core.plugin_api import AttentionMetadata, PositionBias, SdpaAttention, SdpaMetadata, SharedKeys, offset_span

from wde_cpu_kernels.cpu import amx_allowed, cpu_vendor

LOAD_ERRORS: list[str] = []  # why the compiled module did not load, once it has failed
logger = logging.getLogger(__name__)


def unavailable_reason() -> str | None:
    """Why the kernel cannot be used on this machine, or ``None`` when it can."""
    if os.environ.get("WDE_NATIVE_ATTENTION", "1") == "0":
        return "WDE_NATIVE_ATTENTION=0"
    if kernel_isa() is None:
        return f"the CPU has neither AVX-512 nor AVX2 (torch reports {torch.backends.cpu.get_cpu_capability()})"
    return LOAD_ERRORS[0] if LOAD_ERRORS else None


def kernel_isa() -> str | None:
    """The build of the module this CPU runs, by torch's reading of it: ``"AVX512"`` (``_varlen``), ``"AVX2"``
    (``_varlen_avx2``: AVX2 and FMA, no AVX-512), or ``None``."""
    capability = torch.backends.cpu.get_cpu_capability()
    return "AVX512" if "AVX512" in capability else "AVX2" if capability == "AVX2" else None


@functools.lru_cache(maxsize=1)
def varlen_kernel():
    """The compiled module for this CPU (``varlen_attention(q, k, v, cu_seqlens, causal, window, scale)``, the int8
    row kernels, ``layer_norm``), or ``None``."""
    reason = unavailable_reason()
    if reason is None:
        name = "_varlen" if kernel_isa() == "AVX512" else "_varlen_avx2"
        try:
            return importlib.import_module(f"wde_cpu_kernels.{name}")
        except ImportError as exc:  # built against another torch, or not built: SDPA still works
            reason = (f"wde_cpu_kernels.{name} does not load ({exc}); reinstall wde-cpu-kernels with "
                      "--no-build-isolation against the installed torch")
            LOAD_ERRORS.append(reason)
    logger.info("native CPU attention unavailable: %s", reason)
    return None


def cpu_varlen_refusal(dtype: torch.dtype) -> str | None:
    """Why automatic selection should not pick ``cpu_varlen`` for ``dtype`` (float32 or bfloat16) on this CPU, or
    ``None``. bf16 on a CPU without AVX512-BF16 is widened to fp32 (``native_attention``): there torch's bf16 SDPA is
    emulated as well, and the widened kernel measured faster (MiniLM bf16 12.8-13.2 s against 13.9-14.1 for 300
    paragraphs, a Xeon with AVX512-VNNI only) and closer to fp32 (a random XLM-R token classifier's bf16 logits 0.515
    off fp32 against 0.859)."""
    return unavailable_reason() if varlen_kernel() is None else None


def has_avx512_bf16() -> bool:
    """Whether the CPU has AVX512-BF16 (the bf16 kernel's pair dot products)."""
    return bool(getattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)())


WIDENED = "fp32 FMAs (bf16 widened)"


def bf16_products() -> str:
    """What computes the kernel's products in bf16 on this CPU: ``"AMX tiles"`` (where the CPU has them and oneDNN's
    ISA cap admits AMX, ``cpu.amx_allowed``); ``"AVX512-BF16"`` pair dot products on other CPUs with AVX512-BF16 but
    Intel's; else ``WIDENED``, fp32 FMAs on the bf16 rows widened as they are packed. Intel cores issue ``vdpbf16ps``
    one every two cycles and 512-bit FMAs two a cycle (1.35 against 5.45 per ns on a Xeon without AMX, family 6 model
    207), so fp32 FMAs have twice its products' rate there (MiniLM's attention over 2,000 paragraphs 1.25x faster),
    where AMD Zen 4 issues one of each a cycle and the pairs have twice the FMAs' rate."""
    kernel = varlen_kernel()
    if not has_avx512_bf16() or not hasattr(kernel, "varlen_attention_bf16"):  # (the AVX2 build has fp32 only)
        return WIDENED
    if kernel is not None and kernel.amx_available() and amx_allowed():
        return "AMX tiles"
    return WIDENED if cpu_vendor() == "GenuineIntel" else "AVX512-BF16"


def native_attention(q, k, v, cu_seqlens: list[int], causal: bool, window: int | None, scale: float | None,
                     cu_seqlens_k: list[int] = (), bias_by_offset: torch.Tensor | None = None):
    """Attention of packed ``q``/``k``/``v`` (``[tokens, heads, head_dim]``) with the native kernel (fp32
    arithmetic on fp32 or bf16 rows, or bf16 products: ``bf16_products``; other dtypes are widened and the output
    narrowed back). ``cu_seqlens_k``: each sequence's keys when they are not its own rows (``SharedKeys.gather``),
    its queries aligned to its last keys. ``bias_by_offset``: a position bias (``PositionBias.by_offset``, float32
    ``[heads, 2m + 1]``), added inside the kernel by the fp32-arithmetic path (bf16 rows are widened for it: the
    bf16-product kernels take no bias)."""
    alpha = q.shape[-1] ** -0.5 if scale is None else scale
    kernel, reach, cu_k = varlen_kernel(), -1 if window is None else window, list(cu_seqlens_k)
    with torch.profiler.record_function("wde::varlen_attention"):  # a named op in torch profiles
        if q.dtype == torch.bfloat16 and bias_by_offset is None and bf16_products() != WIDENED:
            return kernel.varlen_attention_bf16(q, k, v, cu_seqlens, causal, reach, alpha, amx=amx_allowed(),
                                                cu_seqlens_k=cu_k)
        if q.dtype in (torch.float32, torch.bfloat16):
            return kernel.varlen_attention(q, k, v, cu_seqlens, causal, reach, alpha, cu_seqlens_k=cu_k,
                                           bias=bias_by_offset)
        return kernel.varlen_attention(q.float(), k.float(), v.float(), cu_seqlens, causal, reach, alpha,
                                       cu_seqlens_k=cu_k, bias=bias_by_offset).to(q.dtype)


@dataclass
class NativeMetadata(AttentionMetadata):
    """Adds the sequence boundaries as the list the kernel takes (made once per batch, not per layer), the
    ``torch_sdpa`` metadata for head sizes the kernel does not take (planned only if one comes), and each position
    bias's offsets for this batch (``PositionBias.by_offset``, made by the first layer that passes it)."""

    cu_list: list[int] = field(default_factory=list)
    fallback: SdpaMetadata | None = None
    cu_k_list: list[int] = field(default_factory=list)
    bias_tables: dict[int, tuple[PositionBias, torch.Tensor]] = field(default_factory=dict)

    def bias_by_offset(self, bias: PositionBias | None) -> torch.Tensor | None:
        """``bias``'s offsets as far as this batch's longest sequence reaches, float32 ``[heads, 2m + 1]``."""
        if bias is None:
            return None
        if id(bias) not in self.bias_tables:  # the description is kept too, so that its id stays its own
            longest = self.max_seqlen if self.shared is None else self.shared.max_seqlen_k
            self.bias_tables[id(bias)] = (bias, bias.by_offset(offset_span(bias, longest)).contiguous())
        return self.bias_tables[id(bias)][1]


class NativeCpuAttention(SdpaAttention):
    """The AVX-512 or AVX2 varlen kernel on CPU (``torch_sdpa``'s CPU path for head sizes that are not a multiple of
    16); refused before loading where it cannot be built. Position biases are added inside the kernel."""

    supports_position_bias = True

    def __init__(self, pipeline=None) -> None:
        if pipeline is not None and pipeline.device.type != "cpu":
            raise ValueError(f"attention backend 'cpu_varlen' runs on the CPU, not {pipeline.device}")
        if varlen_kernel() is None:
            raise RuntimeError(f"attention backend 'cpu_varlen' is unavailable: {unavailable_reason()}")
        super().__init__(pipeline)

    def build_metadata(self, seq_lens: list[int], cu_seqlens: torch.Tensor, causal: bool,
                       shared: SharedKeys | None = None) -> NativeMetadata:
        """Sequence boundaries only (and the shared prefixes' key boundaries): the kernel needs no padding plan."""
        return NativeMetadata(seq_lens, cu_seqlens, max(seq_lens), causal, shared, cu_list=cu_seqlens.tolist(),
                              cu_k_list=[] if shared is None else shared.cu_seqlens_k.tolist())

    def forward(self, q, k, v, metadata: NativeMetadata, scale: float | None = None,
                window: int | None = None, bias: PositionBias | None = None) -> torch.Tensor:
        """Attend within each sequence (keys within ``window`` positions if given, ``bias`` added to the scaled
        scores); returns ``[T, heads, head_dim]``."""
        if q.shape[-1] % 16 == 0 and q.stride(-1) == 1:
            if metadata.shared is not None:
                k, v = metadata.shared.gather(k), metadata.shared.gather(v)
            return native_attention(q, k, v, metadata.cu_list, metadata.causal, window, scale, metadata.cu_k_list,
                                    metadata.bias_by_offset(bias))
        if metadata.fallback is None:
            metadata.fallback = super().build_metadata(metadata.seq_lens, metadata.cu_seqlens, metadata.causal,
                                                       metadata.shared)
        return super().forward(q, k, v, metadata.fallback, scale, window, bias)
