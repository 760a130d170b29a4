"""The torch_varlen backend (torch's varlen_attn) against a float64 per-sequence reference: bidirectional and causal,
full and windowed, grouped key/value heads, a given softmax scale. CUDA only (skips without a GPU)."""

from __future__ import annotations

import pytest
import torch

from wde_core.attention.varlen import TorchVarlenAttention, torch_varlen_available, varlen_attn_parameters

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
SEQ_LENS = [90, 40, 39, 12, 1, 128, 7]


def reference(q, k, v, seq_lens, causal, window, scale):
    """Per sequence in float64: scores masked beyond ``window`` (and above the diagonal if causal), softmax."""
    groups = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1)
    q, k, v = (x.double().cpu() for x in (q, k, v))
    out, start = [], 0
    for n in seq_lens:
        qs, ks, vs = (x[start:start + n].transpose(0, 1) for x in (q, k, v))
        scores = qs @ ks.transpose(1, 2) * scale
        i, j = torch.meshgrid(torch.arange(n), torch.arange(n), indexing="ij")
        allowed = ((i - j).abs() <= (n if window is None else window)) & ((j <= i) | (not causal))
        out.append((scores.masked_fill(~allowed, float("-inf")).softmax(-1) @ vs).transpose(0, 1))
        start += n
    return torch.cat(out).float()


@pytest.mark.gpu
@cuda
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("window", [None, 0, 8])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_torch_varlen_matches_the_dense_reference(causal, window, dtype):
    if window is not None and "window_size" not in varlen_attn_parameters():
        pytest.skip(f"torch {torch.__version__}'s varlen_attn takes no window")  # torch 2.10: refused, see below
    gen = torch.Generator().manual_seed(3)
    total = sum(SEQ_LENS)
    q = torch.randn(total, 8, 64, generator=gen)
    k, v = (torch.randn(total, 4, 64, generator=gen) for _ in range(2))
    cu = torch.tensor([0, *torch.tensor(SEQ_LENS).cumsum(0).tolist()], dtype=torch.int32)
    backend = TorchVarlenAttention()
    meta = backend.build_metadata(SEQ_LENS, cu.cuda(), causal)
    scale = 0.1 if "scale" in varlen_attn_parameters() else 64 ** -0.5
    ours = backend.forward(*(x.to("cuda", dtype) for x in (q, k, v)), meta, scale=scale, window=window)
    expected = reference(q, k, v, SEQ_LENS, causal, window, scale)
    error = (ours.float().cpu() - expected).abs().max().item()
    assert error <= (4e-3 if dtype == torch.float16 else 3e-2), error


def test_torch_varlen_is_available_only_on_cuda_in_half_precision():
    assert not torch_varlen_available(torch.device("cpu"), torch.float16)
    assert not torch_varlen_available(torch.device("cuda"), torch.float32)
    assert torch_varlen_available(torch.device("cuda"), torch.bfloat16) == bool(varlen_attn_parameters())
