"""wde's CPU attention kernel (wde-cpu-kernels' ``native_attention``) against torch's SDPA on the padded batch with a
key mask (as HF transformers and sentence-transformers run it), alone: the corpus's real sequence lengths (the
default model's tokenizer), packed into batches of ``--budget`` tokens longest first, ``--layers`` calls per
batch (as a model makes them, cache-warm). Alternating rounds; medians and the ratio; the kernel's rate against
its products' count (4 * heads * head_dim * sum of squared lengths per layer).

    python benchmarks/bench_attention.py --heads 12 --head-dim 32          # all-MiniLM-L6-v2's attention
    python benchmarks/bench_attention.py --head-dim 64 --layers 12 --max-len 512 --n 1000  # bge-base's

``--bias``: a position-biased layer (MPNet-base's: 12 heads of 64, T5 buckets 32 up to 128 positions; ``--max-len
384``, all-mpnet-base-v2's), the bias added inside the kernel against the padded-block path MPNet ran before the
attention contract took biases (packed rows scattered into one ``[B, heads, L, D]`` block per batch, the bias
``[heads, L, L]`` from the table with ``-inf`` on padded keys as SDPA's additive mask, rows gathered back); fp32, over
the 2,000 paragraphs after the first 3,000 (held out: the tests and the other benchmarks read the first ones):

    python benchmarks/bench_attention.py --bias --dtype fp32 --head-dim 64 --layers 12 --max-len 384

``--against PATH`` loads another build of the kernel (its ``_varlen*.so``, e.g. from a checkout of another commit)
beside the installed one and alternates the two in one process: a kernel change is measured without the 2x swings
between processes on a shared host (the AVX512-BF16 path's second accumulator set: 1.02-1.07x that way).
"""

from __future__ import annotations

import importlib.util
import itertools
import math

import torch
import torch.nn.functional as F
from common import load_corpus, measure, parser, print_ratio, timed
from wde_cpu_kernels import attention
from wde_cpu_kernels.attention import native_attention

DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}
HELD_OUT = 3000  # --bias reads the paragraphs after these


def corpus_lengths(n: int, max_len: int, skip: int = 0) -> list[int]:
    """Token counts of ``n`` wiki paragraphs (after the first ``skip``) under the default model's tokenizer (BERT's
    uncased WordPiece, MPNet's vocabulary too), capped at ``max_len``."""
    from transformers import AutoTokenizer
    from wde_bert.packaged import all_minilm_l6_v2

    tokenizer = AutoTokenizer.from_pretrained(str(all_minilm_l6_v2()))
    ids = tokenizer(load_corpus(skip + n)[skip:], truncation=True, max_length=max_len)["input_ids"]
    return [len(x) for x in ids]


def batches_of(lengths: list[int], budget: int) -> list[list[int]]:
    """Lengths packed longest first into batches of at most ``budget`` tokens."""
    batches: list[list[int]] = [[]]
    for length in sorted(lengths, reverse=True):
        if batches[-1] and sum(batches[-1]) + length > budget:
            batches.append([])
        batches[-1].append(length)
    return batches


def packed_inputs(batch: list[int], heads: int, dim: int, dtype: torch.dtype, seed: int):
    """q, k, v as views of one [tokens, 3 * heads * dim] projection (the layout a fused QKV linear leaves)."""
    tokens = sum(batch)
    qkv = torch.randn(tokens, 3 * heads * dim, generator=torch.Generator().manual_seed(seed)).to(dtype)
    return [qkv[:, i * heads * dim:(i + 1) * heads * dim].view(tokens, heads, dim) for i in range(3)]


def padded(x: torch.Tensor, batch: list[int]) -> torch.Tensor:
    """[sequences, heads, longest, dim] of packed ``x``, zeros past each sequence."""
    out = x.new_zeros(len(batch), x.shape[1], max(batch), x.shape[2])
    start = 0
    for s, length in enumerate(batch):
        out[s, :, :length] = x[start:start + length].transpose(0, 1)
        start += length
    return out


def main() -> None:
    """Run both engines over the corpus's batches, alternating, and check the kernel against fp32 SDPA."""
    args = options().parse_args()
    torch.set_num_threads(args.threads)
    if args.bias:
        return bias_main(args, batches_of(corpus_lengths(args.n, args.max_len, HELD_OUT), args.budget))
    dtype = DTYPES[args.dtype]
    batches = batches_of(corpus_lengths(args.n, args.max_len), args.budget)
    work = []
    for b, batch in enumerate(batches):
        q, k, v = packed_inputs(batch, args.heads, args.head_dim, dtype, b)
        cu = [0, *itertools.accumulate(batch)]
        mask = torch.arange(max(batch))[None, :] < torch.tensor(batch)[:, None]
        work.append((q, k, v, cu, padded(q, batch), padded(k, batch), padded(v, batch), mask[:, None, None, :]))
    tokens = sum(map(sum, batches)) * args.layers  # each call counts
    squares = sum(length * length for batch in batches for length in batch)
    print(f"{len(batches)} batches, {tokens // args.layers} tokens, sum of squared lengths {squares}; "
          f"{args.heads} heads of {args.head_dim}, {args.dtype}, {args.threads} threads, {args.layers} calls a batch "
          "(rates count tokens x calls)")
    check_parity(work, args.dtype)

    def kernel() -> None:
        for q, k, v, cu, *_ in work:
            for _ in range(args.layers):
                native_attention(q, k, v, cu, False, None, None)

    def sdpa() -> None:
        for *_, qp, kp, vp, mask in work:
            for _ in range(args.layers):
                F.scaled_dot_product_attention(qp, kp, vp, attn_mask=mask)

    runners = {"wde cpu_varlen": timed(kernel), "torch SDPA (padded, masked)": timed(sdpa)}
    if args.against:
        other = load_build(args.against)
        with_build(other, lambda: check_parity(work, args.dtype))()  # the other build's output, checked the same way
        runners["other build"] = timed(with_build(other, kernel))
    medians, _ = measure(runners, args.rounds, tokens)
    print_ratio(medians, "wde cpu_varlen", "torch SDPA (padded, masked)")
    if args.against:
        print_ratio(medians, "wde cpu_varlen", "other build")
    flops = 4 * args.heads * args.head_dim * squares * args.layers
    print(f"wde cpu_varlen: {flops / (tokens / medians['wde cpu_varlen']) / 1e9:.0f} GFLOP/s of products")


def load_build(path: str):
    """The compiled module at ``path`` (another build's ``_varlen*.so``), loaded beside the installed one under
    another package name (its init symbol is still ``PyInit__varlen``)."""
    spec = importlib.util.spec_from_file_location("other_build._varlen", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def with_build(module, fn):
    """``fn`` run with ``native_attention`` calling ``module`` instead of the installed kernel."""
    def run() -> None:
        installed = attention.varlen_kernel
        attention.varlen_kernel = lambda: module
        try:
            fn()
        finally:
            attention.varlen_kernel = installed
    return run


def check_parity(work, dtype_name: str) -> None:
    """The kernel's output against fp32 SDPA, sequence by sequence, on every tenth batch (printed, and an error
    past bf16's rounding)."""
    worst = 0.0
    for q, k, v, cu, *_ in work[::10]:
        out = native_attention(q, k, v, cu, False, None, None).float()
        for a, b in zip(cu, cu[1:]):
            ref = F.scaled_dot_product_attention(*(t[a:b].transpose(0, 1).float() for t in (q, k, v)))
            diff = (out[a:b] - ref.transpose(0, 1)).abs().max().item()
            worst = diff if math.isnan(diff) or diff > worst else worst  # a NaN output is the worst of all
    print(f"max abs difference from fp32 SDPA: {worst:.2e}")
    bound = 2e-2 if dtype_name == "bf16" else 1e-4
    if not worst <= bound:
        raise SystemExit(f"the kernel's output is {worst:.2e} from fp32 SDPA (bound {bound})")


def options():
    """The benchmark's options (``--rounds`` and ``--threads`` from common.parser)."""
    p = parser(__doc__)
    p.add_argument("--n", type=int, default=2000, help="wiki paragraphs whose token counts make the batches")
    p.add_argument("--max-len", type=int, default=256, help="the model's longest sequence (MiniLM: 256)")
    p.add_argument("--budget", type=int, default=4096, help="tokens per batch, as the engine schedules them")
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--head-dim", type=int, default=32)
    p.add_argument("--layers", type=int, default=6, help="calls per batch (MiniLM has 6 layers)")
    p.add_argument("--dtype", choices=sorted(DTYPES), default="bf16")
    p.add_argument("--against", default=None, help="another build's _varlen*.so, timed beside the installed one")
    p.add_argument("--bias", action="store_true", help="MPNet's relative position bias: in the kernel vs padded SDPA")
    return p


def bias_main(args, batches: list[list[int]]) -> None:
    """MPNet's bias added inside cpu_varlen against the padded-block SDPA path, alternating; parity printed."""
    from wde_core.plugin_api import BucketedBias, offset_span

    table = torch.randn(32, args.heads, generator=torch.Generator().manual_seed(1))
    bias = BucketedBias(table, max_distance=128, bidirectional=True)
    dtype = DTYPES[args.dtype]
    work = [(batch, *packed_inputs(batch, args.heads, args.head_dim, dtype, b)) for b, batch in enumerate(batches)]
    tokens = sum(map(sum, batches)) * args.layers
    print(f"{len(batches)} batches of {sum(map(sum, batches))} tokens (paragraphs {HELD_OUT}..{HELD_OUT + args.n - 1}),"
          f" {args.heads} heads of {args.head_dim}, 32 buckets up to 128, {args.dtype}, {args.threads} threads, "
          f"{args.layers} calls a batch")

    def in_kernel(batch, q, k, v) -> torch.Tensor:
        """Once per batch the bias's offsets, then every layer's call with them."""
        cu, by_offset = [0, *itertools.accumulate(batch)], bias.by_offset(offset_span(bias, max(batch)))
        return [native_attention(q, k, v, cu, False, None, None, bias_by_offset=by_offset)
                for _ in range(args.layers)][-1]

    def padded_block(batch, q, k, v) -> torch.Tensor:
        """MPNet's path before the contract: the bias and mask once per batch, every layer scatter, SDPA, gather."""
        longest, lengths = max(batch), torch.tensor(batch)
        index = torch.cat([s * longest + torch.arange(n) for s, n in enumerate(batch)])
        positions = torch.arange(longest)
        dense = table[mpnet_bucket(positions[None, :] - positions[:, None])].permute(2, 0, 1).to(dtype)
        mask = dense[None].masked_fill(~(positions[None, :] < lengths[:, None])[:, None, None, :], float("-inf"))
        if min(batch) == longest:  # as MPNet did: equal lengths are a view, the bias alone the mask
            views = [x.view(len(batch), longest, *x.shape[1:]).transpose(1, 2) for x in (q, k, v)]
            return [F.scaled_dot_product_attention(*views, attn_mask=dense[None]) for _ in range(args.layers)][-1] \
                .transpose(1, 2).reshape(q.shape)
        for _ in range(args.layers):
            blocks = []
            for x in (q, k, v):
                block = x.new_zeros(len(batch) * longest, x.shape[1], x.shape[2])
                blocks.append(block.index_copy_(0, index, x).view(len(batch), longest, *x.shape[1:]).transpose(1, 2))
            out = F.scaled_dot_product_attention(*blocks, attn_mask=mask).transpose(1, 2).reshape(-1, *q.shape[1:])
            out = out.index_select(0, index)
        return out

    for name, path in (("in-kernel bias", in_kernel), ("padded-block SDPA", padded_block)):
        worst = bias_parity(work[::10], path, table)
        print(f"{name}: max abs difference from float64 attention with transformers' MPNet buckets: {worst:.2e}")
        if dtype == torch.float32 and not worst <= 1e-5:
            raise SystemExit(f"{name} is {worst:.2e} from the float64 reference (bound 1e-5)")
    runners = {name: timed(lambda path=path: [path(*item) for item in work])
               for name, path in (("in-kernel bias", in_kernel), ("padded-block SDPA", padded_block))}
    medians, _ = measure(runners, args.rounds, tokens)
    print_ratio(medians, "in-kernel bias", "padded-block SDPA")


def mpnet_bucket(offset: torch.Tensor) -> torch.Tensor:
    """transformers' MPNet bucket (32 buckets up to 128) of key - query offsets."""
    from transformers.models.mpnet.modeling_mpnet import MPNetEncoder

    return MPNetEncoder.relative_position_bucket(offset)


def bias_parity(work, path, table: torch.Tensor) -> float:
    """The largest difference of ``path``'s output from float64 softmax attention with the bias, per sequence."""
    worst = 0.0
    for batch, q, k, v in work:
        out, start = path(batch, q, k, v).double(), 0
        for n in batch:
            positions = torch.arange(n)
            added = table.double()[mpnet_bucket(positions[None, :] - positions[:, None])].permute(2, 0, 1)
            qs, ks, vs = (x[start:start + n].double().transpose(0, 1) for x in (q, k, v))
            probs = torch.softmax(qs @ ks.transpose(1, 2) * q.shape[-1] ** -0.5 + added, dim=-1)
            worst = max(worst, (out[start:start + n] - (probs @ vs).transpose(0, 1)).abs().max().item())
            start += n
    return worst


if __name__ == "__main__":
    main()
