"""Model-input builder: one flat, padding-free batch of tensors plus attention metadata."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from itertools import chain
from typing import Any

import numpy as np
import torch

from wde_core.plugins.entries import import_target
from wde_core.stages.request import Request
from wde_core.stages.shared_prefix import plan_shared_prefixes, shared_keys, shares_prefixes


@dataclass
class ModelInput:
    """A packed batch: ``T`` tokens of ``B`` sequences laid end to end, ``cu_seqlens[b]:cu_seqlens[b+1]`` being
    sequence ``b``'s. ``positions`` restart (from the position offset) in every sequence; ``pool_start``: the
    first pooled token of each (after an excluded prompt); ``outputs``: what the requests asked for."""

    input_ids: torch.Tensor
    positions: torch.Tensor
    token_type_ids: torch.Tensor | None
    cu_seqlens: torch.Tensor
    max_seqlen: int
    seq_lens: list[int]
    pool_start: torch.Tensor
    attn_metadata: Any
    outputs: frozenset[str] = frozenset({"dense"})
    padding: int = 0

    @property
    def num_seqs(self) -> int:
        """The number of sequences in the batch."""
        return len(self.seq_lens)

    def drop_padding(self, hidden: torch.Tensor) -> torch.Tensor:
        """``hidden`` (one row per token of ``input_ids``) without the padding rows: one row per sequence token."""
        return hidden if not self.padding else hidden[: hidden.shape[0] - self.padding]

    def to(self, device: torch.device) -> "ModelInput":
        """Return a copy with every tensor (metadata included) on ``device``."""
        return move_to(self, device)


def move_to(obj: Any, device: torch.device | str, *, non_blocking: bool = True, pin: bool = False) -> Any:
    """Move the tensors of a dataclass or dict (recursively) to ``device``; pass ``non_blocking=False``
    for results copied back to the CPU, which must be complete when read, and ``pin=True`` to stage CPU tensors
    in pinned memory first (a copy to a GPU that never waits for the GPU's queue)."""
    if isinstance(obj, torch.Tensor):
        if pin and obj.device.type == "cpu":
            obj = obj.pin_memory()
        return obj.to(device, non_blocking=non_blocking)
    if isinstance(obj, dict):
        return {key: move_to(value, device, non_blocking=non_blocking, pin=pin) for key, value in obj.items()}
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        changes = {f.name: move_to(getattr(obj, f.name), device, non_blocking=non_blocking, pin=pin)
                   for f in dataclasses.fields(obj)}
        return dataclasses.replace(obj, **changes)
    return obj


class FlatBatchBuilder:
    """Concatenates the requests' tokens; no sequence is padded. Requests marked with the same
    ``shared_prefix`` hold their common leading tokens once (:mod:`wde_core.stages.shared_prefix`) where the
    model is causal, pools the last token and the attention backend ``supports_shared_prefix``. On CPU, for a
    model class that ``takes_padding_rows``, the batch's row count is rounded up (:func:`padding_rows`), unless a
    quantizer replaced its linear layers' kernels (wde-cpu-kernels' int8 kernels pad their own rows)."""

    def __init__(self, pipeline, attention_backend) -> None:
        self.attention = attention_backend
        self.causal = pipeline.settings.causal
        self.position_offset = pipeline.settings.position_offset
        self.may_share = shares_prefixes(pipeline) and getattr(attention_backend, "supports_shared_prefix", False)
        self.pads = (pipeline.device.type == "cpu" and pipeline.quantize is None
                     and takes_padding_rows(import_target(pipeline.link.model)))
        self.pad_id = getattr(pipeline.model.config, "pad_token_id", None) or 0

    def build(self, requests: list[Request]) -> ModelInput:
        """Pack ``requests`` into one :class:`ModelInput` on the CPU (index arithmetic in numpy: torch's small CPU
        ops each enter an OpenMP region, 0.2-4 ms apiece on a busy host, which the host path cannot afford)."""
        outputs = frozenset(name for r in requests for name in getattr(r.options, "output", ("dense",)))
        plan = plan_shared_prefixes(requests) if self.may_share and "tokens" not in outputs else None
        skipped = [0] * len(requests) if plan is None else [n for _, n in plan]
        seq_lens = [r.num_tokens - n for r, n in zip(requests, skipped)]
        cu_seqlens = np.concatenate([[0], np.cumsum(seq_lens)]).astype(np.int32)
        total = int(cu_seqlens[-1])
        starts = np.repeat(cu_seqlens[:-1] - np.array(skipped, dtype=np.int64), seq_lens)
        positions = np.arange(total, dtype=np.int64) - starts + self.position_offset
        input_ids = _flat(requests, skipped, "token_ids", total)
        typed = any(r.token_type_ids is not None for r in requests)
        token_types = _flat(requests, skipped, "token_type_ids", total) if typed else None
        prompt_lens = np.array([max(r.prompt_len - n, 0) for r, n in zip(requests, skipped)], dtype=np.int64)
        cu = torch.from_numpy(cu_seqlens)
        shared = {} if plan is None else {"shared": shared_keys(plan, cu_seqlens.tolist())}
        padding = padding_rows(total) if self.pads and plan is None else 0
        if padding:
            input_ids = np.concatenate([input_ids, np.full(padding, self.pad_id, dtype=np.int64)])
            positions = np.concatenate([positions, np.full(padding, self.position_offset, dtype=np.int64)])
            token_types = None if token_types is None else np.concatenate([token_types, np.zeros(padding, np.int64)])
        attend_lens = seq_lens + [padding] if padding else seq_lens
        attend_cu = torch.from_numpy(np.append(cu_seqlens, np.int32(total + padding))) if padding else cu
        return ModelInput(torch.from_numpy(input_ids), torch.from_numpy(positions),
                          None if token_types is None else torch.from_numpy(token_types), cu, max(seq_lens), seq_lens,
                          pool_start=torch.from_numpy(cu_seqlens[:-1] + prompt_lens),
                          attn_metadata=self.attention.build_metadata(attend_lens, attend_cu, causal=self.causal,
                                                                      **shared),
                          outputs=outputs, padding=padding)


def takes_padding_rows(model_class: type) -> bool:
    """Whether the model class itself (not a base class) declares ``takes_padding_rows = True``: its forward
    takes :attr:`ModelInput.padding` rows and drops them before per-token work of its own."""
    return bool(vars(model_class).get("takes_padding_rows", False))


def padding_rows(total: int) -> int:
    """Rows to add to a CPU batch of ``total`` tokens: up to the next multiple of a sixteenth of its power of two
    (none below 32 rows, 2s from 32, 4s from 64, ... 128s from 2,048), so at most 1/16 more rows. oneDNN builds a
    matrix-product primitive (about 7 ms for bf16 on AMX) for every new row count and keeps 1,024: with these steps
    a 4,096-token budget makes 144 row counts per layer shape, so they stay cached."""
    return -total % (1 << max(total.bit_length() - 5, 0))


def _flat(requests: list[Request], skipped: list[int], field: str, total: int) -> np.ndarray:
    """The requests' ``field`` lists (past each one's ``skipped`` shared tokens) laid end to end, as int64 (zeros for
    a request without it: token types of a single text)."""
    lists = ((getattr(r, field) or [0] * r.num_tokens)[n:] for r, n in zip(requests, skipped))
    return np.fromiter(chain.from_iterable(lists),
                       dtype=np.int64, count=total)
