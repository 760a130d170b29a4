"""Shared prefixes in every attention backend: sequences whose keys begin with a prefix held in another sequence's
rows (``SharedKeys``) attend exactly as the whole sequences would, against a dense causal reference over each
request's full tokens; and the planning of which requests share how many tokens."""

from __future__ import annotations

import pytest
import torch

from conftest import CPU_BACKENDS
from wde_core.attention.eager import EagerAttention
from wde_core.attention.flash import FlashAttention, flash_attn_available
from wde_core.attention.sdpa import SdpaAttention
from wde_core.stages.request import Request
from wde_core.stages.shared_prefix import MIN_SHARED_TOKENS, plan_shared_prefixes, shared_keys
from wde_cpu_kernels.attention import NativeCpuAttention

# (group, prefix tokens, own tokens) per request in batch order; the first request of a group holds its prefix
SCENARIOS = {
    "one-group": [("a", 40, 9), ("a", 40, 3), ("a", 40, 17), ("a", 40, 1)],
    "interleaved": [("a", 23, 30), ("b", 70, 5), (None, 0, 33), ("a", 23, 2), ("b", 70, 64), ("a", 23, 12)],
    "long-prefix": [("a", 150, 20), ("a", 150, 6), (None, 0, 130), ("a", 150, 140)],
}


def unblocked_sdpa():
    """The SDPA backend as on a GPU: one padded block for the batch."""
    backend = SdpaAttention()
    backend.blocked = False
    return backend


BACKENDS = {"eager": EagerAttention, "sdpa": SdpaAttention, "sdpa-padded": unblocked_sdpa}
if "cpu_varlen" in CPU_BACKENDS:
    BACKENDS["cpu_varlen"] = NativeCpuAttention


def full_sequences(scenario, heads=4, kv_heads=2, dim=32, seed=0):
    """Each request's whole q/k/v (members of a group have the same prefix rows)."""
    gen = torch.Generator().manual_seed(seed)
    prefixes, out = {}, []
    for group, prefix, own in scenario:
        if group not in prefixes:
            prefixes[group] = [torch.randn(prefix, h, dim, generator=gen) for h in (heads, kv_heads, kv_heads)]
        rows = [torch.randn(own, h, dim, generator=gen) for h in (heads, kv_heads, kv_heads)]
        out.append([torch.cat((p, r)) for p, r in zip(prefixes[group], rows)])
    return out


def dense_causal(q, k, v, window):
    """One whole sequence in float64: causal, keys within ``window`` positions if given."""
    groups = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1)
    qs, ks, vs = (x.transpose(0, 1).double() for x in (q, k, v))
    n = q.shape[0]
    i, j = torch.meshgrid(torch.arange(n), torch.arange(n), indexing="ij")
    allowed = (j <= i) & ((i - j) <= (n if window is None else window))
    scores = (qs @ ks.transpose(1, 2) / q.shape[-1] ** 0.5).masked_fill(~allowed, float("-inf"))
    return (scores.softmax(-1) @ vs).transpose(0, 1).float()


def packed_batch(scenario, sequences):
    """The batch as the builder packs it: holders whole, members only their own rows; the plan; the reference."""
    plan, holders = [], {}
    for s, (group, prefix, _) in enumerate(scenario):
        holder = holders.setdefault(group, s) if group is not None else s
        plan.append((holder, prefix if holder != s else 0))
    parts = [[x[skipped:] for x in seq] for seq, (_, skipped) in zip(sequences, plan)]
    q, k, v = (torch.cat([p[i] for p in parts]) for i in range(3))
    seq_lens = [p[0].shape[0] for p in parts]
    return q, k, v, seq_lens, plan


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
@pytest.mark.parametrize("window", [None, 8, 60])
@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_shared_prefix_attention_equals_whole_sequences(backend, scenario, window):
    sequences = full_sequences(SCENARIOS[scenario])
    q, k, v, seq_lens, plan = packed_batch(SCENARIOS[scenario], sequences)
    cu = torch.tensor([0, *torch.tensor(seq_lens).cumsum(0).tolist()], dtype=torch.int32)
    attention = BACKENDS[backend]()
    meta = attention.build_metadata(seq_lens, cu, True, shared=shared_keys(plan, cu.tolist()))
    ours = attention.forward(q, k, v, meta, window=window)
    expected = torch.cat([dense_causal(*seq, window)[skipped:] for seq, (_, skipped) in zip(sequences, plan)])
    diff = (ours - expected).abs().max().item()
    assert diff <= 1e-5, f"{backend} {scenario} window={window}: max abs diff {diff:.3g}"
    if backend == "cpu_varlen" and torch.cpu._is_avx512_bf16_supported():  # bf16: AMX tiles and AVX512-BF16
        from wde_cpu_kernels.attention import varlen_kernel

        qb, kb, vb = (x.bfloat16() for x in (q, meta.shared.gather(k), meta.shared.gather(v)))
        for amx in (True, False):
            bf16 = varlen_kernel().varlen_attention_bf16(qb, kb, vb, meta.cu_list, True, -1 if window is None else
                                                         window, 32 ** -0.5, amx, cu_seqlens_k=meta.cu_k_list)
            assert (bf16.float() - expected).abs().max().item() <= 2e-2, f"bf16 amx={amx}"


@pytest.mark.skipif(not (torch.cuda.is_available() and flash_attn_available()), reason="needs CUDA and flash-attn")
def test_flash_attn_shared_prefix_equals_whole_sequences():
    scenario = SCENARIOS["interleaved"]
    sequences = full_sequences(scenario, dim=64)
    q, k, v, seq_lens, plan = packed_batch(scenario, sequences)
    cu = torch.tensor([0, *torch.tensor(seq_lens).cumsum(0).tolist()], dtype=torch.int32)
    attention = FlashAttention()
    meta = attention.build_metadata(seq_lens, cu.cuda(), True, shared=shared_keys(plan, cu.tolist()))
    meta.shared.key_index, meta.shared.cu_seqlens_k = meta.shared.key_index.cuda(), meta.shared.cu_seqlens_k.cuda()
    ours = attention.forward(*(x.cuda().half() for x in (q, k, v)), meta).float().cpu()
    expected = torch.cat([dense_causal(*seq, None)[skipped:] for seq, (_, skipped) in zip(sequences, plan)])
    assert (ours - expected).abs().max().item() <= 2e-3


def requests(*token_lists, keys):
    return [Request(i, "", token_ids=list(ids), shared_prefix=key) for i, (ids, key) in enumerate(zip(token_lists,
                                                                                                      keys))]


def test_plan_shares_the_longest_common_prefix_of_each_group_and_keeps_the_last_token_own():
    base = list(range(100, 100 + 30))
    batch = requests(base + [1, 2], base + [1, 3, 4], [7] * 40, base[:20] + [9], base, keys=["q", "q", None, "q", "q"])
    plan = plan_shared_prefixes(batch)
    # group "q": its four requests begin with the same 20 tokens (request 3 diverges after them)
    assert plan == [(0, 0), (0, 20), (2, 0), (0, 20), (0, 20)]
    whole = requests(base, base, keys=["q", "q"])  # identical inputs: the last token stays each one's own
    assert plan_shared_prefixes(whole) == [(0, 0), (0, 29)]


def test_plan_shares_nothing_below_the_minimum_or_without_a_group():
    short = list(range(MIN_SHARED_TOKENS - 1))
    assert plan_shared_prefixes(requests(short + [1], short + [2], keys=["q", "q"])) is None
    long = list(range(MIN_SHARED_TOKENS + 5))
    assert plan_shared_prefixes(requests(long + [1], long + [2], keys=[None, None])) is None
    assert plan_shared_prefixes(requests(long + [1], long + [2], keys=["q", "r"])) is None
    assert plan_shared_prefixes(requests(long + [1], long + [2], keys=["q", "q"])) == [(0, 0), (0, len(long))]


@pytest.mark.skipif("cpu_varlen" not in CPU_BACKENDS, reason="the native kernel needs AVX-512")
def test_kernel_refuses_key_bounds_that_do_not_fit():
    from wde_cpu_kernels.attention import varlen_kernel

    q, k, v = torch.randn(6, 2, 16), torch.randn(10, 2, 16), torch.randn(10, 2, 16)
    kernel = varlen_kernel()
    with pytest.raises(RuntimeError, match="cu_seqlens do not match the rows of q and k"):
        kernel.varlen_attention(q, k, v, [0, 6], True, -1, 0.25, cu_seqlens_k=[0, 9])
    with pytest.raises(RuntimeError, match="fewer keys than queries"):
        kernel.varlen_attention(q, k, v, [0, 4, 6], True, -1, 0.25, cu_seqlens_k=[0, 3, 10])
