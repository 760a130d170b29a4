"""The CPU row padding of packed batches (``FlatBatchBuilder``, ``ModelInput.padding``): row counts in steps, pad
rows attended as a sequence of their own and dropped by the model, outputs equal to HF's; oneDNN's own report that
nearby batch sizes reuse its matrix-product primitives."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys

import pytest
import torch
from transformers import BertModel

from conftest import CPU_BACKENDS, save_random_bert
from wde_core import Engine
from wde_core.plugin_api import FlatBatchBuilder, Request
from wde_core.stages.model_input import padding_rows, takes_padding_rows
from wde_plugin_kit.packed import random_requests, reference_states, wde_states


@pytest.mark.parametrize("total, padded", [(1, 1), (31, 31), (33, 34), (50, 50), (65, 68), (101, 104), (500, 512),
                                           (513, 544), (4000, 4096), (4096, 4096)])
def test_row_counts_come_in_sixteenths_of_their_power_of_two(total, padded):
    assert total + padding_rows(total) == padded


def test_only_a_class_that_declares_it_takes_padding_rows():
    from wde_bert.model import BertEncoder

    class Subclass(BertEncoder):  # e.g. a head with per-token work of its own: not padded until it says so
        pass

    assert takes_padding_rows(BertEncoder) and not takes_padding_rows(Subclass)


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_padded_batches_keep_hf_states(tmp_path, backend):
    """A batch of 129 tokens runs as 136 rows (7 pad rows attended as one more sequence), and every sequence's
    states still equal HF's ``BertModel`` within 1e-4."""
    directory = save_random_bert(tmp_path, seed=3, max_position_embeddings=64)
    reference = BertModel.from_pretrained(directory, attn_implementation="eager").eval()
    engine = Engine(str(directory), device="cpu", attention_backend=backend)
    requests = random_requests(reference.config, [1, 5, 9, 22, 60, 32])
    batch = engine.builder.build(requests)
    assert (batch.padding, batch.input_ids.shape[0], batch.positions.shape[0]) == (7, 136, 136)
    assert batch.attn_metadata.seq_lens == [1, 5, 9, 22, 60, 32, 7] and batch.seq_lens == [1, 5, 9, 22, 60, 32]
    assert batch.input_ids[129:].tolist() == [reference.config.pad_token_id] * 7
    for ours, theirs in zip(wde_states(engine, requests), reference_states(reference, requests)):
        assert ours.shape == theirs.shape
        assert (ours - theirs).abs().max().item() <= 1e-4


def test_no_padding_off_the_cpu_when_quantized_or_with_a_stepped_total(tmp_path):
    directory = save_random_bert(tmp_path, seed=3)
    engine = Engine(str(directory), device="cpu")
    requests = [Request(index=i, text="", token_ids=list(range(100, 116))) for i in range(4)]  # 64 tokens
    assert engine.builder.build(requests).padding == 0
    odd = requests[:3] + [Request(index=3, text="", token_ids=[101, 102, 103])]  # 51 tokens: a step of 2
    assert engine.builder.build(odd).padding == 1
    on_cuda = dataclasses.replace(engine.pipeline, device=torch.device("cuda"))  # the builder only reads it
    assert FlatBatchBuilder(on_cuda, engine.attention).build(odd).padding == 0
    quantized = dataclasses.replace(engine.pipeline, quantize="wde_cpu_kernels.int8:quantize_model")
    assert FlatBatchBuilder(quantized, engine.attention).build(odd).padding == 0  # its kernels pad their own rows


PRIMITIVE_PROBE = """
import sys, torch
from wde_core import Engine
from wde_core.plugin_api import EmbedOptions, Request
engine = Engine(sys.argv[1], device="cpu", dtype="bfloat16")
for total in (700, 705, 730):  # rows 704, 736, 736
    lens = [100] * (total // 100) + [total % 100]
    requests = [Request(index=i, text="", token_ids=[101] + [1000 + i] * (n - 2) + [102],
                        options=EmbedOptions()) for i, n in enumerate(lens)]
    engine.run(requests)
    print("BATCH", flush=True)
"""


@pytest.mark.skipif("AVX512" not in torch.backends.cpu.get_cpu_capability(), reason="no AVX-512 on this CPU (hardware)")
def test_nearby_batch_sizes_reuse_onednns_bf16_primitives(tmp_path):
    """oneDNN's own report (ONEDNN_VERBOSE=2): a bf16 batch of 705 tokens after one of 700 builds matrix-product
    primitives (736 rows against 704), one of 730 builds none (736 again). Unpadded, every new token count built
    one per layer shape: about 7 ms each on an AMX Xeon, bf16 MiniLM 1.2-1.37x slower on texts it had not seen."""
    directory = save_random_bert(tmp_path, seed=3, max_position_embeddings=128)
    run = subprocess.run([sys.executable, "-c", PRIMITIVE_PROBE, str(directory)], capture_output=True, text=True,
                         timeout=300, env={**os.environ, "ONEDNN_VERBOSE": "2"})
    assert run.returncode == 0, run.stderr
    batches = run.stdout.split("BATCH")[:3]
    misses = [[line for line in batch.splitlines() if "create:cache_miss" in line and ("matmul" in line or
               "inner_product" in line)] for batch in batches]
    assert len(misses[0]) >= 4 and len(misses[1]) >= 4, misses[:2]  # QKV, attention output, FFN in, FFN out
    assert misses[2] == [], misses[2]
