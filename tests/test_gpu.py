"""CUDA paths: torch_sdpa in fp32 and fp16, the flash_attn backend, the automatic choices.

Everything marked ``gpu`` skips where no CUDA device is present (flash-attn tests also skip
where the package is not installed); the CPU-side refusals run everywhere.
"""

from __future__ import annotations

import pytest
import torch
from transformers import BertModel

from conftest import save_random_bert
from wde_plugin_kit.packed import random_requests, reference_states
from wde_core import Engine, assemble_pipeline

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
CONFIG = dict(hidden_size=128, num_attention_heads=4, num_hidden_layers=3, intermediate_size=256,
              max_position_embeddings=96)


@pytest.fixture(scope="module")
def gpu_case(tmp_path_factory):
    directory = save_random_bert(tmp_path_factory.mktemp("gpu-bert"), seed=11, **CONFIG)
    reference = BertModel.from_pretrained(directory, attn_implementation="eager").eval()
    requests = random_requests(reference.config, [1, 7, 33, 96, 50, 2, 64, 95, 13], seed=4)
    return directory, requests, reference_states(reference, requests)


def engine_states(engine: Engine, requests) -> list[torch.Tensor]:
    model_input = engine.builder.build(requests)
    with torch.inference_mode():
        hidden = engine.executor.worker.model(model_input.to(engine.pipeline.device))
    return [h.float().cpu() for h in torch.split(hidden, model_input.seq_lens)]


def max_error(ours, theirs) -> float:
    return max((a - b).abs().max().item() for a, b in zip(ours, theirs))


@pytest.mark.gpu
@cuda
def test_cuda_sdpa_fp32_matches_hf(gpu_case):
    directory, requests, expected = gpu_case
    engine = Engine(str(directory), device="cuda", dtype="float32", attention_backend="torch_sdpa")
    assert max_error(engine_states(engine, requests), expected) <= 1e-4


@pytest.mark.gpu
@cuda
@pytest.mark.parametrize("backend", ["torch_sdpa", "eager"])
def test_cuda_half_precision_error_is_bounded(gpu_case, backend):
    directory, requests, expected = gpu_case
    engine = Engine(str(directory), device="cuda", attention_backend=backend)
    assert engine.pipeline.dtype == torch.float16  # dtype="auto" on CUDA
    ours = engine_states(engine, requests)
    error = max_error(ours, expected)
    print(f"fp16 {backend}: max abs error {error:.2e}")
    assert error <= 2e-2
    cos = min(torch.nn.functional.cosine_similarity(a, b, dim=-1).min().item() for a, b in zip(ours, expected))
    assert cos >= 0.9999


@pytest.mark.gpu
@cuda
def test_flash_attn_backend_matches_hf(gpu_case):
    pytest.importorskip("flash_attn")
    directory, requests, expected = gpu_case
    auto = assemble_pipeline(str(directory), device="cuda", dtype="bfloat16")
    assert auto.components["attention_backend"].name == "flash_attn"
    engine = Engine(str(directory), device="cuda", dtype="float16", attention_backend="flash_attn")
    assert max_error(engine_states(engine, requests), expected) <= 2e-2


@pytest.mark.gpu
@cuda
def test_auto_backend_on_cuda_names_its_reason(gpu_case):
    directory = gpu_case[0]
    pipeline = assemble_pipeline(str(directory), device="cuda")
    reason = pipeline.reasons["attention_backend"]
    try:
        import flash_attn  # noqa: F401
        assert pipeline.components["attention_backend"].name == "flash_attn"
    except ImportError:
        assert pipeline.components["attention_backend"].name == "torch_varlen"
        assert reason.startswith("auto: CUDA, half precision, torch's varlen_attn")


@pytest.mark.gpu
@cuda
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_torch_varlen_backend_matches_hf(gpu_case, dtype):
    directory, requests, expected = gpu_case
    engine = Engine(str(directory), device="cuda", dtype=dtype, attention_backend="torch_varlen")
    ours = engine_states(engine, requests)
    error = max_error(ours, expected)
    cos = min(torch.nn.functional.cosine_similarity(a, b, dim=-1).min().item() for a, b in zip(ours, expected))
    print(f"{dtype} torch_varlen: max abs error {error:.2e}, min cosine {cos:.6f}")
    assert error <= (2e-2 if dtype == "float16" else 8e-2) and cos >= 0.999


@pytest.mark.gpu
@cuda
def test_launched_batches_overlap_and_keep_their_order(gpu_case):
    """On CUDA the sync executor launches a batch and returns before it finishes: two batches in flight, the outputs
    in input order and equal to one batch at a time."""
    directory = gpu_case[0]
    texts = [" ".join(["word"] * n) for n in (3, 40, 7, 60, 12, 1, 33, 80) * 8]
    engine = Engine(str(directory), device="cuda", dtype="float16", max_num_batched_tokens=256)
    assert engine.executor.max_in_flight == 2
    together = engine.encode(texts)
    alone = [engine.encode(text) for text in texts]
    assert max(abs(a - b).max() for a, b in zip(together, alone)) <= 2e-3


def test_torch_varlen_is_refused_on_cpu_before_loading(tiny_bert_dir):
    with pytest.raises(ValueError, match="attention backend 'torch_varlen' needs a CUDA device, float16 or bfloat16"):
        Engine(str(tiny_bert_dir), device="cpu", attention_backend="torch_varlen")


def test_flash_attn_is_refused_on_cpu_before_loading(tiny_bert_dir):
    with pytest.raises(ValueError, match="attention backend 'flash_attn' needs a CUDA device, not cpu"):
        Engine(str(tiny_bert_dir), device="cpu", attention_backend="flash_attn")


def test_flash_attn_is_refused_in_float32_on_cuda_too():
    from types import SimpleNamespace

    from wde_core.attention.flash import FlashAttention

    pipeline = SimpleNamespace(device=torch.device("cuda"), dtype=torch.float32)
    with pytest.raises(ValueError, match="needs float16 or bfloat16, not torch.float32"):
        FlashAttention(pipeline)
