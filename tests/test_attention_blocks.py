"""CPU attention in blocks of similar-length sequences equals the eager reference, and plans few blocks."""

from __future__ import annotations

import random

import pytest
import torch

from wde_core.attention.blocks import group_runs, plan_blocks
from wde_core.attention.eager import EagerAttention
from wde_core.attention.sdpa import SdpaAttention


def packed(seq_lens, heads, kv_heads, dim, dtype=torch.float32, seed=0):
    gen = torch.Generator().manual_seed(seed)
    total = sum(seq_lens)
    return (torch.randn(total, heads, dim, generator=gen, dtype=dtype),
            torch.randn(total, kv_heads, dim, generator=gen, dtype=dtype),
            torch.randn(total, kv_heads, dim, generator=gen, dtype=dtype))


def cu(seq_lens):
    return torch.tensor([0] + list(torch.tensor(seq_lens).cumsum(0)), dtype=torch.int32)


LENGTHS = [[7], [5, 5, 5], [40, 39, 39, 12, 12, 11, 3, 1], [1, 90, 2, 90, 17], list(range(64, 0, -3))]


@pytest.mark.parametrize("seq_lens", LENGTHS, ids=[str(len(s)) for s in LENGTHS])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("kv_heads", [4, 2])
def test_blocked_sdpa_equals_eager(seq_lens, causal, kv_heads):
    q, k, v = packed(seq_lens, 4, kv_heads, 16)
    eager, sdpa = EagerAttention(), SdpaAttention()
    reference = eager.forward(q, k, v, eager.build_metadata(seq_lens, cu(seq_lens), causal))
    meta = sdpa.build_metadata(seq_lens, cu(seq_lens), causal)
    assert (meta.blocks is not None) == (len(set(seq_lens)) > 1)
    torch.testing.assert_close(sdpa.forward(q, k, v, meta), reference, atol=1e-5, rtol=1e-5)


def test_runs_of_equal_lengths_are_views_and_padding_stays_within_budget():
    random.seed(0)
    lens = sorted((random.randint(8, 256) for _ in range(60)), reverse=True)
    blocks = plan_blocks(lens, causal=False)
    assert sum(b.stop - b.start for b in blocks) == sum(lens) and len(blocks) < len(lens) // 2
    for b, group in zip(blocks, group_runs(lens)):
        real = sum(n * n for n in group)
        assert b.n * b.longest ** 2 <= max(1.25 * real, real + 64 * 64)
        assert (b.src is None) == (min(group) == max(group))
    assert [len(g) for g in group_runs([30, 30, 30, 30])] == [4]


BF16_LENGTHS = [[40, 39, 39, 12, 12, 11, 3, 1], [170, 169, 60, 59, 2], [100, 100, 50, 50], [33], [20, 20, 20]]


@pytest.mark.parametrize("seq_lens", BF16_LENGTHS, ids=[str(len(s)) for s in BF16_LENGTHS])
@pytest.mark.parametrize("causal, window", [(False, None), (True, None), (False, 5), (True, 7)])
@pytest.mark.parametrize("kv_heads", [4, 2])
def test_bf16_blocks_stay_close_to_the_fp32_reference(seq_lens, causal, window, kv_heads, monkeypatch):
    """bf16 blocks (or a batch of equal lengths) of up to BMM_MAX_LEN tokens take the batched-matmul path, longer
    ones flash SDPA; both stay within bf16 rounding of the fp32 eager reference (max abs diff about 0.02 here)."""
    from wde_core.attention import sdpa as sdpa_module

    calls = []
    bmm = sdpa_module._bmm_attention
    monkeypatch.setattr(sdpa_module, "_bmm_attention", lambda *a: calls.append(a[0].shape[2]) or bmm(*a))

    q, k, v = packed(seq_lens, 4, kv_heads, 32, seed=3)
    eager, sdpa = EagerAttention(), SdpaAttention()
    reference = eager.forward(q, k, v, eager.build_metadata(seq_lens, cu(seq_lens), causal), window=window)
    meta = sdpa.build_metadata(seq_lens, cu(seq_lens), causal)
    got = sdpa.forward(q.bfloat16(), k.bfloat16(), v.bfloat16(), meta, window=window).float()
    assert calls and max(calls) <= sdpa_module.BMM_MAX_LEN  # the short blocks took it; a 170-token one did not
    assert got.isfinite().all()
    assert (got - reference).abs().max().item() <= 0.06
    cosine = torch.nn.functional.cosine_similarity(got.flatten(1), reference.flatten(1), dim=1)
    assert cosine.min().item() >= 0.999
