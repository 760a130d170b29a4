"""cpu_varlen, wde's varlen attention kernel (each build this CPU runs: AVX-512, AVX2): against the eager reference (varlen, causal, sliding
window, grouped KV heads, head sizes 16-128, strided views of a fused QKV), its automatic choice on CPU in
float32, the fallback to torch_sdpa, whole-model parity through it, and that it was compiled at install (an
engine's first call builds nothing)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
from transformers import BertModel

from wde_plugin_kit.cpu_info import cpu_flags, proc_cpuinfo
from wde_plugin_kit.encoders import save_random_bert
from wde_plugin_kit.packed import packed_diff, random_requests
from wde_core import Engine
from wde_core.attention.eager import EagerAttention
from wde_cpu_kernels.attention import (NativeCpuAttention, bf16_products, has_avx512_bf16, native_attention,
                                       unavailable_reason, varlen_kernel)
from wde_core.plugin_api import SdpaAttention

from kernel_builds import HAS_KERNEL, build, load_build, needs_kernel, runs  # noqa: F401 (build: a fixture)

HAS_AVX512 = runs("AVX512")
# the vendor read here, independently of wde_core.plugin_api.cpu_vendor (the bf16 path depends on it)
INTEL = proc_cpuinfo().get("vendor_id") == "GenuineIntel"


def test_the_installed_kernel_loads_where_the_cpu_has_avx512_or_avx2():
    """The AVX-512 build where the CPU has AVX-512, else the AVX2 one where it has AVX2 (torch's reading of the CPU)."""
    kernel = varlen_kernel()
    assert (kernel is not None) == HAS_KERNEL, unavailable_reason()
    if HAS_KERNEL:
        assert kernel.__name__ == ("wde_cpu_kernels._varlen" if HAS_AVX512 else "wde_cpu_kernels._varlen_avx2")


@needs_kernel
def test_the_first_engine_call_compiles_nothing(tiny_bert_dir, tmp_path):
    """In a fresh process with torch's JIT loader made to fail, an engine picks cpu_varlen and embeds: the kernel is
    the module built at install, and no extension cache is written."""
    script = (
        "import torch.utils.cpp_extension as ext\n"
        "def refuse(*a, **k): raise AssertionError('compiled at run time')\n"
        "ext.load = ext.load_inline = refuse\n"
        "from wde_core import Engine\n"
        f"e = Engine({str(tiny_bert_dir)!r})\n"
        "print(e.pipeline.components['attention_backend'].name)\n"
        "print(e.encode(['hello world']).shape)\n")
    env = {"TORCH_EXTENSIONS_DIR": str(tmp_path / "ext"), "PATH": "/nonexistent"}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                          env={**os.environ, **env})
    assert done.returncode == 0, done.stderr[-2000:]
    backend, shape = done.stdout.splitlines()[-2:]
    assert backend == "cpu_varlen" and shape.startswith("("), done.stdout
    assert not (tmp_path / "ext").exists()


def packed_qkv(seq_lens, heads, kv_heads, dim, dtype=torch.float32, seed=0):
    """q, k and v as strided views of one fused projection output, as the models produce them."""
    torch.manual_seed(seed)
    tokens = sum(seq_lens)
    fused = torch.randn(tokens, (heads + 2 * kv_heads) * dim, dtype=dtype)
    q = fused[:, :heads * dim].view(tokens, heads, dim)
    k = fused[:, heads * dim:(heads + kv_heads) * dim].view(tokens, kv_heads, dim)
    v = fused[:, (heads + kv_heads) * dim:].view(tokens, kv_heads, dim)
    return q, k, v


def attend(backend, q, k, v, seq_lens, causal, window, scale=None):
    cu_seqlens = torch.tensor([0, *seq_lens]).cumsum(0)
    meta = backend.build_metadata(list(seq_lens), cu_seqlens, causal)
    return backend.forward(q, k, v, meta, scale, window)


CASES = [([5, 17, 33, 1, 100, 250], 4, 2, 32), ([7, 130, 64], 12, 12, 64), ([300, 9], 2, 1, 128),
         ([16], 3, 3, 16), ([1, 1, 2], 2, 2, 32), ([129, 128, 127], 4, 4, 48)]


@needs_kernel
@pytest.mark.parametrize("seq_lens,heads,kv_heads,dim", CASES)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("window", [None, 3, 40])
def test_kernel_matches_the_eager_reference(build, seq_lens, heads, kv_heads, dim, causal, window):
    q, k, v = packed_qkv(seq_lens, heads, kv_heads, dim)
    ours = attend(NativeCpuAttention(), q, k, v, seq_lens, causal, window)
    reference = attend(EagerAttention(), q.contiguous(), k.contiguous(), v.contiguous(), seq_lens, causal, window)
    assert ours.shape == reference.shape and ours.dtype == torch.float32
    assert (ours - reference).abs().max().item() < 1e-5


def bf16_kernel_path(path, q, k, v, seq_lens, causal, window, kernel=None):
    """The kernel's bf16 output by ``path``: ``"pairs"`` (AVX512-BF16 dot products) or ``"widened"`` (fp32 FMAs), of
    ``kernel`` (a build; the loaded one by default)."""
    kernel = kernel or varlen_kernel()
    cu = [0, *torch.tensor(seq_lens).cumsum(0).tolist()]
    reach, scale = -1 if window is None else window, q.shape[-1] ** -0.5
    if path == "pairs":
        return kernel.varlen_attention_bf16(q, k, v, cu, causal, reach, scale, amx=False)
    return kernel.varlen_attention(q, k, v, cu, causal, reach, scale)


@needs_kernel
@pytest.mark.parametrize("seq_lens,heads,kv_heads,dim", CASES)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("window", [None, 40])
@pytest.mark.parametrize("isa,path", [("AVX512", "pairs"), ("AVX512", "widened"), ("AVX2", "widened")])
def test_bfloat16_is_as_close_to_fp32_as_torch_sdpa_in_bfloat16(seq_lens, heads, kv_heads, dim, causal, window, isa,
                                                                  path):
    """Both bf16 paths of the AVX-512 build (the pairs only where the CPU has AVX512-BF16) and the AVX2 build's
    (widened), every head size's packing (16 and 48: part-filled blocks of 16 key pairs) and the short exp polynomial:
    no further from fp32 than torch's own bf16 attention."""
    build = load_build(isa)
    if path == "pairs" and not has_avx512_bf16():
        pytest.skip("no AVX512-BF16 on this CPU (hardware)")
    q, k, v = packed_qkv(seq_lens, heads, kv_heads, dim, seed=7)
    reference = attend(EagerAttention(), q.contiguous(), k.contiguous(), v.contiguous(), seq_lens, causal, window)
    half = [x.bfloat16() for x in (q, k, v)]
    ours = bf16_kernel_path(path, *half, seq_lens, causal, window, build).float()
    theirs = attend(SdpaAttention(), *half, seq_lens, causal, window).float()
    ours_err, theirs_err = ((x - reference).abs() for x in (ours, theirs))
    assert ours_err.max() <= 1.2 * theirs_err.max() and ours_err.mean() <= 1.1 * theirs_err.mean()


@needs_kernel
@pytest.mark.parametrize("seq_lens,heads,kv_heads,dim", CASES)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("window", [None, 3])
def test_widened_bfloat16_is_the_fp32_kernel_on_the_widened_rows_rounded_once(build, seq_lens, heads, kv_heads, dim,
                                                                               causal, window):
    """bf16 rows widened inside the kernel (query rows per register block, keys and values per item) give exactly
    the fp32 kernel's output on ``.float()`` copies of them, rounded to bf16 half to even: nothing else is rounded."""
    half = [x.bfloat16() for x in packed_qkv(seq_lens, heads, kv_heads, dim, seed=13)]
    widened = bf16_kernel_path("widened", *half, seq_lens, causal, window, build)
    on_copies = bf16_kernel_path("widened", *(x.float() for x in half), seq_lens, causal, window, build)
    assert widened.dtype == torch.bfloat16 and torch.equal(widened, on_copies.bfloat16())


@needs_kernel
def test_amx_is_used_exactly_where_the_cpu_has_it():
    """AMX tiles where the CPU has them; else AVX512-BF16 pairs, except on Intel cores (``vdpbf16ps`` at half the
    FMAs' rate there) and CPUs without AVX512-BF16, which widen bf16 to fp32; and native_attention takes that path."""
    has_amx = {"amx_bf16", "amx_tile"} <= cpu_flags()
    assert getattr(varlen_kernel(), "amx_available", lambda: False)() == has_amx  # the AVX-512 build's
    expected = ("AMX tiles" if has_amx else "AVX512-BF16" if has_avx512_bf16() and not INTEL
                else "fp32 FMAs (bf16 widened)")
    assert bf16_products() == expected
    seq_lens = [100, 7, 33]
    q, k, v = (x.bfloat16() for x in packed_qkv(seq_lens, 4, 4, 32, seed=2))
    path = {"AVX512-BF16": "pairs", "fp32 FMAs (bf16 widened)": "widened"}.get(expected)
    if path is not None:
        assert torch.equal(native_attention(q, k, v, [0, 100, 107, 140], False, None, None),
                           bf16_kernel_path(path, q, k, v, seq_lens, False, None))


needs_amx = pytest.mark.skipif(not {"amx_bf16", "amx_tile"} <= cpu_flags() or not HAS_AVX512,
                               reason="no AMX-BF16 on this CPU (hardware)")


@needs_amx
@pytest.mark.parametrize("seq_lens,heads,kv_heads,dim", [c for c in CASES if c[3] % 32 == 0] +
                         [([129, 128, 127, 31], 4, 4, 96)])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("window", [None, 3, 40])
def test_amx_tiles_match_the_avx512_bf16_path(seq_lens, heads, kv_heads, dim, causal, window):
    """The AMX path (blocks of 16 rows, 32-key chunks of probabilities by values) against the AVX512-BF16 path and the
    fp32 reference: the same error as the AVX512-BF16 path, and within one bf16 rounding of it."""
    q, k, v = packed_qkv(seq_lens, heads, kv_heads, dim, seed=11)
    cu = [0, *torch.tensor(seq_lens).cumsum(0).tolist()]
    reach, scale = -1 if window is None else window, dim ** -0.5
    half = [x.bfloat16() for x in (q, k, v)]
    tiles, pairs = (varlen_kernel().varlen_attention_bf16(*half, cu, causal, reach, scale, amx).float()
                    for amx in (True, False))
    reference = attend(EagerAttention(), *(x.float().contiguous() for x in half), seq_lens, causal, window)
    assert (tiles - pairs).abs().max() <= 2 ** -7 * pairs.abs().max()  # one bf16 rounding of the output
    assert (tiles - reference).abs().max() <= 1.2 * (pairs - reference).abs().max()
    assert (tiles - reference).abs().mean() <= 1.1 * (pairs - reference).abs().mean()


@needs_amx
def test_onednns_isa_cap_keeps_the_kernel_off_amx(monkeypatch):
    """``ONEDNN_MAX_CPU_ISA`` below AMX (as a user sets it to keep oneDNN off the tiles) takes the attention kernel
    off AMX too: to its non-AMX bf16 path (``bf16_products``), where uncapped it is the AMX path's."""
    q, k, v = (x.bfloat16() for x in packed_qkv([129, 40, 7], 4, 4, 32, seed=5))
    cu = [0, 129, 169, 176]
    tiles, pairs = (varlen_kernel().varlen_attention_bf16(q, k, v, cu, False, -1, 32 ** -0.5, amx)
                    for amx in (True, False))
    assert not torch.equal(tiles, pairs)
    assert torch.equal(native_attention(q, k, v, cu, False, None, None), tiles)
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX512_CORE_BF16")
    assert bf16_products() == ("fp32 FMAs (bf16 widened)" if INTEL else "AVX512-BF16")  # AMX CPUs are Intel's so far
    off_amx = native_attention(q, k, v, cu, False, None, None)
    assert torch.equal(off_amx, bf16_kernel_path("widened" if INTEL else "pairs", q, k, v, [129, 40, 7], False, None))
    assert not torch.equal(off_amx, tiles)


@needs_kernel
def test_scale_and_bfloat16_inputs(build):
    seq_lens = [40, 3, 77]
    q, k, v = packed_qkv(seq_lens, 4, 4, 32, seed=3)
    reference = attend(EagerAttention(), q.contiguous(), k.contiguous(), v.contiguous(), seq_lens, False, None, 0.05)
    assert (attend(NativeCpuAttention(), q, k, v, seq_lens, False, None, 0.05) - reference).abs().max() < 1e-5
    half = attend(NativeCpuAttention(), q.bfloat16(), k.bfloat16(), v.bfloat16(), seq_lens, False, None, 0.05)
    assert half.dtype == torch.bfloat16
    assert (half.float() - reference).abs().max() < 2e-2  # bf16 inputs: the rounding of q, k, v and the output


@needs_kernel
def test_auto_choice_on_cpu_float32_and_parity_with_hf(tiny_bert_dir):
    engine = Engine(str(tiny_bert_dir), device="cpu")
    assert engine.pipeline.components["attention_backend"].name == "cpu_varlen"
    isa = "AVX512" if HAS_AVX512 else "AVX2"
    assert engine.pipeline.reasons["attention_backend"] == f"auto: wde's {isa} varlen kernel on cpu with float32"
    bf16 = Engine(str(tiny_bert_dir), device="cpu", dtype="bfloat16")  # widened to fp32 without AVX512-BF16
    assert bf16.pipeline.components["attention_backend"].name == "cpu_varlen"
    assert bf16.pipeline.reasons["attention_backend"] == (f"auto: wde's {isa} varlen kernel on cpu with bfloat16 "
                                                          f"(products by {bf16_products()})")


@needs_kernel
def test_whole_model_matches_hf_through_the_kernel(build, tmp_path):
    directory = save_random_bert(tmp_path / "bert", seed=5, hidden_size=128, num_attention_heads=4,
                                 num_hidden_layers=3, intermediate_size=256, max_position_embeddings=300)
    reference = BertModel.from_pretrained(directory, attn_implementation="eager").eval()
    engine = Engine(str(directory), device="cpu", attention_backend="cpu_varlen")
    requests = random_requests(reference.config, [1, 7, 33, 299, 50, 2, 64, 160, 13], seed=4)
    assert packed_diff(engine, reference, requests) < 1e-4


def test_disabled_kernel_falls_back_to_torch_sdpa_and_says_why(tiny_bert_dir, monkeypatch):
    monkeypatch.setenv("WDE_NATIVE_ATTENTION", "0")
    varlen_kernel.cache_clear()
    try:
        engine = Engine(str(tiny_bert_dir), device="cpu")
        assert engine.pipeline.components["attention_backend"].name == "torch_sdpa"
        assert engine.pipeline.reasons["attention_backend"] == (
            "auto: torch_sdpa on cpu with float32 (cpu_varlen: WDE_NATIVE_ATTENTION=0)")
        with pytest.raises(RuntimeError, match="'cpu_varlen' is unavailable: WDE_NATIVE_ATTENTION=0"):
            Engine(str(tiny_bert_dir), device="cpu", attention_backend="cpu_varlen")
    finally:
        varlen_kernel.cache_clear()


@needs_kernel
def test_head_sizes_the_kernel_does_not_take_use_the_sdpa_path(build):
    seq_lens = [9, 30, 4]
    q, k, v = packed_qkv(seq_lens, 4, 2, 8)
    reference = attend(EagerAttention(), q.contiguous(), k.contiguous(), v.contiguous(), seq_lens, True, None)
    assert (attend(NativeCpuAttention(), q, k, v, seq_lens, True, None) - reference).abs().max() < 1e-5


def test_refused_off_the_cpu():
    from types import SimpleNamespace

    with pytest.raises(ValueError, match="'cpu_varlen' runs on the CPU, not cuda"):
        NativeCpuAttention(SimpleNamespace(device=torch.device("cuda")))
