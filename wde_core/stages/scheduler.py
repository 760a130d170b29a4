"""Prefill-only scheduler: no KV cache, no preemption; batches bounded by tokens and sequences."""

from __future__ import annotations

from collections import deque
from typing import Iterable

from wde_core.request import Request


class TokenBudgetScheduler:
    """First come, first served; each batch holds at most ``max_num_batched_tokens`` tokens and ``max_num_seqs``
    sequences. Requests added together are queued longest first, and each batch is put longest first, so
    equal lengths sit side by side and attention pads little."""

    def __init__(self, pipeline) -> None:
        self.max_tokens = pipeline.args.max_num_batched_tokens
        self.max_seqs = pipeline.args.max_num_seqs
        self.waiting: deque[Request] = deque()

    def add(self, requests: Iterable[Request]) -> None:
        """Queue tokenized requests, longest first within this call."""
        for request in sorted(requests, key=lambda r: -r.num_tokens):
            if request.num_tokens > self.max_tokens:
                raise ValueError(f"input {request.index}: {request.num_tokens} tokens exceed "
                                 f"max_num_batched_tokens={self.max_tokens}")
            self.waiting.append(request)

    def has_waiting(self) -> bool:
        """Whether requests are queued."""
        return bool(self.waiting)

    def schedule(self) -> list[Request]:
        """Pop the next batch (empty when nothing waits)."""
        batch: list[Request] = []
        tokens = 0
        while self.waiting and len(batch) < self.max_seqs:
            n = self.waiting[0].num_tokens
            if batch and tokens + n > self.max_tokens:
                break
            batch.append(self.waiting.popleft())
            tokens += n
        batch.sort(key=lambda r: -r.num_tokens)  # equal lengths side by side: attention needs less padding
        return batch

    def clear(self) -> None:
        """Drop every queued request (after a failure)."""
        self.waiting.clear()
