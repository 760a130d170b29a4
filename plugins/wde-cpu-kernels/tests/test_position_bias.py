"""The attention contract's position bias on every CPU backend (``eager``, ``torch_sdpa`` blocked and padded,
``cpu_varlen`` in each build this CPU runs) against an independent reference: transformers' T5
``_relative_position_bucket`` or ALiBi's published formula (Press et al., 2022: ``-m_h * (i - j)`` for the keys a
causal query sees, mirrored to ``-m_h * |i - j|`` for encoders; the paper's slopes ``2^(-8 h / n)``), then plain
float64 softmax attention per sequence. Packed batches of random lengths 1..600 (1 and 600 included)."""

from __future__ import annotations

import random

import pytest
import torch
from transformers.models.t5.modeling_t5 import T5Attention

from wde_core.attention.eager import EagerAttention
from wde_core.plugin_api import AlibiBias, BucketedBias, SdpaAttention, alibi_slopes
from wde_cpu_kernels.attention import NativeCpuAttention

from kernel_builds import build, needs_kernel  # noqa: F401 (build: a fixture)

HEADS, DIM = 4, 64


def packed_lengths(count: int, seed: int) -> list[int]:
    """Random lengths in 1..600, with 1 and 600 among them."""
    rng = random.Random(seed)
    lengths = [1, 600] + [rng.randint(1, 600) for _ in range(count - 2)]
    rng.shuffle(lengths)
    return lengths


def reference_bias(kind: str, table_or_slopes: torch.Tensor, n: int, bidirectional: bool = True,
                   max_distance: int = 128) -> torch.Tensor:
    """``[heads, n, n]`` float64 bias of one sequence, by transformers' T5 bucket rule or ALiBi's formula."""
    query = torch.arange(n)[:, None]
    key = torch.arange(n)[None, :]
    if kind == "alibi":  # Press et al.: -m * distance, the slopes of alibi_slopes checked against the paper below
        return -table_or_slopes.double()[:, None, None] * (query - key).abs()[None]
    buckets = T5Attention._relative_position_bucket(key - query, bidirectional=bidirectional,
                                                    num_buckets=table_or_slopes.shape[0], max_distance=max_distance)
    return table_or_slopes.double()[buckets].permute(2, 0, 1)


def reference_attention(q, k, v, lengths, causal, bias_of) -> torch.Tensor:
    """Float64 softmax attention per sequence with ``bias_of(n)`` added to the scaled scores."""
    out, start = [], 0
    for n in lengths:
        qs, ks, vs = (x[start:start + n].double().transpose(0, 1) for x in (q, k, v))
        scores = qs @ ks.transpose(1, 2) * q.shape[-1] ** -0.5 + bias_of(n)
        if causal:
            scores = scores.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
        out.append((torch.softmax(scores, dim=-1) @ vs).transpose(0, 1))
        start += n
    return torch.cat(out)


def unblocked_sdpa() -> SdpaAttention:
    """torch_sdpa's padded path (one block for the batch, as on GPU)."""
    backend = SdpaAttention()
    backend.blocked = False
    return backend


CPU_BACKENDS = {"eager": EagerAttention, "sdpa-blocked": SdpaAttention, "sdpa-padded": unblocked_sdpa}
BIASES = ["t5-bidirectional", "t5-causal-rule", "alibi"]


def bias_case(name: str):
    """(description, reference bias of a sequence of n) for ``name``."""
    torch.manual_seed(7)
    if name == "alibi":
        slopes = alibi_slopes(HEADS)
        return AlibiBias(slopes), lambda n: reference_bias("alibi", slopes, n)
    bidirectional, buckets = name == "t5-bidirectional", 32 if name == "t5-bidirectional" else 16
    table = torch.randn(buckets, HEADS) * 2
    return (BucketedBias(table, 128, bidirectional),
            lambda n: reference_bias("t5", table, n, bidirectional))


def run(backend, q, k, v, lengths, causal, bias):
    """One packed batch through a backend with the bias."""
    meta = backend.build_metadata(lengths, torch.tensor([0, *lengths]).cumsum(0), causal)
    return backend.forward(q, k, v, meta, None, None, bias)


def packed_inputs(lengths, dtype=torch.float32, seed=0):
    """Random packed q, k, v ``[tokens, HEADS, DIM]``."""
    torch.manual_seed(seed)
    return tuple(torch.randn(sum(lengths), HEADS, DIM).to(dtype) for _ in range(3))


def test_alibi_slopes_are_the_papers():
    # 8 heads: 1/2 .. 1/256; 12 heads: 8's then every other of 16's (the authors' get_slopes)
    assert alibi_slopes(8).tolist() == [2.0 ** -k for k in range(1, 9)]
    assert alibi_slopes(12).tolist()[8:] == pytest.approx([2 ** -0.5, 2 ** -1.5, 2 ** -2.5, 2 ** -3.5])


@pytest.mark.parametrize("name", BIASES)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("backend", list(CPU_BACKENDS))
def test_core_backends_add_the_bias_fp32(backend, name, causal):
    lengths = packed_lengths(8, seed=3)
    bias, bias_of = bias_case(name)
    q, k, v = packed_inputs(lengths)
    ours = run(CPU_BACKENDS[backend](), q, k, v, lengths, causal, bias)
    assert (ours.double() - reference_attention(q, k, v, lengths, causal, bias_of)).abs().max().item() < 1e-5


@needs_kernel
@pytest.mark.parametrize("name", BIASES)
@pytest.mark.parametrize("causal", [False, True])
def test_cpu_varlen_adds_the_bias_in_its_kernel_fp32(build, name, causal):
    lengths = packed_lengths(12, seed=5)
    bias, bias_of = bias_case(name)
    q, k, v = packed_inputs(lengths)
    ours = run(NativeCpuAttention(), q, k, v, lengths, causal, bias)
    assert (ours.double() - reference_attention(q, k, v, lengths, causal, bias_of)).abs().max().item() < 1e-5


# bf16 q, k, v: the error against the float64 reference on the same (bf16-rounded) inputs, measured on an AMD Zen 3
# (the AVX2 build) at most 0.0078 for eager (fp32 arithmetic, the output rounded once), 0.0076 for cpu_varlen (the same,
# in its kernel) and 0.0099 for torch_sdpa (the bias rounded to bf16 in its additive mask, bf16 arithmetic): bf16's
# half step at the outputs' magnitude (up to 2-4), so the bounds are 1.5x those
BF16_BOUNDS = {"eager": 0.012, "sdpa-blocked": 0.015, "cpu_varlen": 0.012}


@pytest.mark.parametrize("name", BIASES)
@pytest.mark.parametrize("backend", ["eager", "sdpa-blocked", pytest.param("cpu_varlen", marks=needs_kernel)])
def test_every_cpu_backend_adds_the_bias_in_bf16_within_its_measured_error(backend, name):
    lengths = packed_lengths(8, seed=9)
    bias, bias_of = bias_case(name)
    q, k, v = packed_inputs(lengths, torch.bfloat16)
    make = NativeCpuAttention if backend == "cpu_varlen" else CPU_BACKENDS[backend]
    ours = run(make(), q, k, v, lengths, False, bias)
    assert ours.dtype == torch.bfloat16
    error = (ours.double() - reference_attention(q, k, v, lengths, False, bias_of)).abs().max().item()
    print(f"{backend} {name} bf16: {error:.4f}")
    assert error < BF16_BOUNDS[backend]


SHARED_BACKENDS = ["eager", "sdpa-blocked", "sdpa-padded", pytest.param("cpu_varlen", marks=needs_kernel)]


@pytest.mark.parametrize("name", ["t5-causal-rule", "alibi"])
@pytest.mark.parametrize("backend", SHARED_BACKENDS)
def test_shared_prefix_keys_take_the_bias_of_their_place_in_the_whole_sequence(backend, name):
    # packed: A (a 70-token prefix + 9 own rows), B (5 own rows after A's prefix), C (1 row alone): causal, B's queries
    # at positions 70..74 of its whole sequence, against each whole sequence attended alone
    from wde_core.plugin_api import SharedKeys

    bias, bias_of = bias_case(name)
    q, k, v = packed_inputs([79, 5, 1], seed=11)
    keys = SharedKeys.of([[(0, 79)], [(0, 70), (79, 84)], [(84, 85)]])
    backend_obj = NativeCpuAttention() if backend == "cpu_varlen" else CPU_BACKENDS[backend]()
    meta = backend_obj.build_metadata([79, 5, 1], torch.tensor([0, 79, 84, 85]), True, keys)
    ours = backend_obj.forward(q, k, v, meta, None, None, bias)
    whole = [slice(0, 79), [*range(70), *range(79, 84)], slice(84, 85)]
    expected = [reference_attention(q[rows], k[rows], v[rows], [len(q[rows])], True, bias_of)[-n:]
                for rows, n in zip(whole, (79, 5, 1))]
    assert (ours.double() - torch.cat(expected)).abs().max().item() < 1e-5
