"""A symmetric (bidirectional) sliding window in every attention backend, against a dense masked reference:
each query sees the keys within ``window`` positions either side (causal: the left side only)."""

from __future__ import annotations

import pytest
import torch

from conftest import CPU_BACKENDS
from wde_core.attention.base import position_mask
from wde_core.attention.eager import EagerAttention
from wde_core.attention.flash import FlashAttention, flash_attn_available
from wde_cpu_kernels.attention import NativeCpuAttention
from wde_core.attention.sdpa import SdpaAttention

LENGTHS = [[7], [30, 30, 30], [40, 39, 39, 12, 12, 11, 3, 1], [1, 90, 2, 90, 17], list(range(64, 0, -5))]


def packed(seq_lens, heads=4, kv_heads=2, dim=16, seed=0, dtype=torch.float32, device="cpu"):
    gen = torch.Generator().manual_seed(seed)
    total = sum(seq_lens)
    q = torch.randn(total, heads, dim, generator=gen)
    k, v = (torch.randn(total, kv_heads, dim, generator=gen) for _ in range(2))
    return tuple(x.to(device=device, dtype=dtype) for x in (q, k, v))


def cu(seq_lens):
    return torch.tensor([0, *torch.tensor(seq_lens).cumsum(0).tolist()], dtype=torch.int32)


def dense_reference(q, k, v, seq_lens, window, causal=False):
    """Per sequence, in float64: scores masked where ``|i - j| > window`` (and ``j > i`` if causal), softmax."""
    groups = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1)
    out, start = [], 0
    for n in seq_lens:
        qs, ks, vs = (x[start:start + n].transpose(0, 1).double() for x in (q, k, v))
        scores = qs @ ks.transpose(1, 2) / q.shape[-1] ** 0.5
        i, j = torch.meshgrid(torch.arange(n), torch.arange(n), indexing="ij")
        allowed = ((i - j).abs() <= window) & ((j <= i) | (not causal))
        out.append((scores.masked_fill(~allowed, float("-inf")).softmax(-1) @ vs).transpose(0, 1))
        start += n
    return torch.cat(out).float()


def unblocked_sdpa():
    """The SDPA backend as on a GPU: one padded block for the batch, with a mask."""
    backend = SdpaAttention()
    backend.blocked = False
    return backend


BACKENDS = {"eager": EagerAttention, "sdpa-blocked": SdpaAttention, "sdpa-padded": unblocked_sdpa}
if "cpu_varlen" in CPU_BACKENDS:
    BACKENDS["cpu_varlen"] = NativeCpuAttention


@pytest.mark.parametrize("seq_lens", LENGTHS, ids=[str(len(s)) for s in LENGTHS])
@pytest.mark.parametrize("window", [0, 1, 4, 16, 200])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_window_matches_dense_masked_reference(backend, seq_lens, window, causal):
    q, k, v = packed(seq_lens, seed=window)
    attention = BACKENDS[backend]()
    meta = attention.build_metadata(seq_lens, cu(seq_lens), causal)
    ours = attention.forward(q, k, v, meta, window=window)
    diff = (ours - dense_reference(q, k, v, seq_lens, window, causal)).abs().max().item()
    assert diff <= 1e-5, f"{backend} window={window} causal={causal}: max abs diff {diff:.3g}"


@pytest.mark.parametrize("backend", sorted(BACKENDS))
@pytest.mark.parametrize("causal", [False, True])
def test_no_window_and_a_window_covering_every_sequence_are_full_attention(backend, causal):
    seq_lens = [33, 20, 20, 5]
    q, k, v = packed(seq_lens, seed=3)
    attention = BACKENDS[backend]()
    meta = attention.build_metadata(seq_lens, cu(seq_lens), causal)
    full = dense_reference(q, k, v, seq_lens, window=10**6, causal=causal)
    for window in (None, 32, 10**6):
        torch.testing.assert_close(attention.forward(q, k, v, meta, window=window), full, atol=1e-5, rtol=1e-5)


def test_position_mask():
    assert position_mask(5, False, None) is None and position_mask(5, False, 4) is None
    band = position_mask(5, False, 1).int().tolist()
    assert band == [[1, 1, 0, 0, 0], [1, 1, 1, 0, 0], [0, 1, 1, 1, 0], [0, 0, 1, 1, 1], [0, 0, 0, 1, 1]]
    assert position_mask(4, True, None).int().tolist() == [[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1]]
    assert position_mask(4, True, 1).int().tolist() == [[1, 0, 0, 0], [1, 1, 0, 0], [0, 1, 1, 0], [0, 0, 1, 1]]


@pytest.mark.skipif(not (torch.cuda.is_available() and flash_attn_available()), reason="needs CUDA and flash-attn")
@pytest.mark.parametrize("causal", [False, True])
def test_flash_attn_window_matches_dense_masked_reference(causal):
    seq_lens = [90, 40, 39, 12, 1]
    q, k, v = packed(seq_lens, dim=64, dtype=torch.float16, device="cuda")
    attention = FlashAttention()
    meta = attention.build_metadata(seq_lens, cu(seq_lens).cuda(), causal)
    for window in (0, 8, 32):
        ours = attention.forward(q, k, v, meta, window=window).float().cpu()
        reference = dense_reference(q.float().cpu(), k.float().cpu(), v.float().cpu(), seq_lens, window, causal)
        assert (ours - reference).abs().max().item() <= 2e-3
