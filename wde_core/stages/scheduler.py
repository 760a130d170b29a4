"""Prefill-only scheduler: no KV cache, no preemption; batches bounded by tokens and sequences, formed fairly."""

from __future__ import annotations

from collections import deque
from typing import Any, Callable, Iterable

from wde_core.stages.request import InputValueError, Request
from wde_core.stages.shared_prefix import BatchTokens, shares_prefixes

TENANT_QUANTUM, CALL_QUANTUM = 512, 128  # tokens a tenant, and a call within it, take in one turn


class _Turns:
    """Keyed queues taking turns of ``quantum`` tokens: a new key joins the keys not served yet (smallest
    ``size`` first, then in arrival order), ahead of those served."""

    def __init__(self, quantum: int) -> None:
        self.queues: dict[Any, Any] = {}
        self.order: deque = deque()
        self.sizes: dict[Any, int] = {}  # of the keys not served yet: the first len(sizes) in order
        self.used = 0
        self.quantum = quantum

    def queue(self, key: Any, make: Callable[[], Any], size: int = 0) -> Any:
        """The queue under ``key``, made and put in line when new."""
        if key not in self.queues:
            unserved, first = len(self.sizes), 1 if self.used else 0  # never ahead of a head mid-turn
            at = next((i for i in range(first, unserved) if self.sizes[self.order[i]] > size), max(first, unserved))
            self.order.insert(at, key)
            self.queues[key], self.sizes[key] = make(), size
        return self.queues[key]

    def took(self, tokens: int, *, empty: bool) -> None:
        """The head took ``tokens``; after a quantum (or when ``empty``) it goes to the back of the line (or out)."""
        self.used += tokens
        if not empty and self.used < self.quantum:
            return
        key, self.used = self.order.popleft(), 0
        self.sizes.pop(key, None)
        if empty:
            del self.queues[key]
        else:
            self.order.append(key)

    def remove(self, key: Any) -> Any:
        """Take ``key``'s queue out of the line and return it."""
        self.used = self.used if self.order.index(key) else 0
        self.sizes.pop(key, None)
        self.order.remove(key)
        return self.queues.pop(key)


class TokenBudgetScheduler:
    """Each batch holds at most ``max_num_batched_tokens`` tokens and ``max_num_seqs`` sequences, taken in
    turns: round-robin over tenants (``Request.tenant``), each turn up to ``TENANT_QUANTUM`` tokens, and
    within a tenant over calls (``Request.call_id``), each turn up to ``CALL_QUANTUM`` tokens (a turn takes
    at least one request), so a small call is not stuck behind big ones, however many requests they hold;
    calls not served yet go ahead of those already served, the smallest first. A call's requests are queued
    longest first, and each batch is put longest first, so equal lengths sit side by side and attention pads
    little. With one call this is first come, first served."""

    def __init__(self, pipeline) -> None:
        self.max_tokens = pipeline.args.max_num_batched_tokens
        self.max_seqs = pipeline.args.max_num_seqs
        self.counts_shared = shares_prefixes(pipeline)  # a shared prefix counts once against the budget
        self.tenants = _Turns(TENANT_QUANTUM)

    def add(self, requests: Iterable[Request]) -> None:
        """Queue tokenized requests, longest first within this call."""
        requests = sorted(requests, key=lambda r: -r.num_tokens)
        if requests and requests[0].num_tokens > self.max_tokens:  # the longest
            raise InputValueError(requests[0].index, f"{requests[0].num_tokens} tokens exceed "
                             f"max_num_batched_tokens={self.max_tokens}")
        size = sum(r.num_tokens for r in requests)
        keys = {(r.tenant, r.call_id) for r in requests}
        if len(keys) == 1:  # one call's requests (the usual case): one queue lookup for all of them
            (tenant, call_id), = keys
            self.tenants.queue(tenant, lambda: _Turns(CALL_QUANTUM)).queue(call_id, deque, size).extend(requests)
            return
        for request in requests:
            calls = self.tenants.queue(request.tenant, lambda: _Turns(CALL_QUANTUM))
            calls.queue(request.call_id, deque, size).append(request)

    def has_waiting(self) -> bool:
        """Whether requests are queued."""
        return bool(self.tenants.order)

    def num_waiting(self) -> int:
        """How many requests are queued."""
        return sum(len(requests) for calls in self.tenants.queues.values() for requests in calls.queues.values())

    def schedule(self) -> list[Request]:
        """Pop the next batch (empty when nothing waits)."""
        if self.counts_shared:
            return self._schedule_sharing()
        batch: list[Request] = []
        total, tenants = 0, self.tenants
        while tenants.order and len(batch) < self.max_seqs:
            calls = tenants.queues[tenants.order[0]]  # the tenant whose turn it is
            requests = calls.queues[calls.order[0]]  # its call whose turn it is
            room = min(calls.quantum - calls.used, tenants.quantum - tenants.used)
            taken = 0  # this turn's tokens: the requests it takes, up to its room (at least one)
            while requests and len(batch) < self.max_seqs and taken < room:
                request = requests[0]
                tokens = request.num_tokens
                if batch and total + request.vision_tokens + tokens > self.max_tokens:
                    break
                batch.append(requests.popleft())
                total += request.vision_tokens + tokens
                taken += tokens
            if not taken and requests:  # the budget is spent
                break
            calls.took(taken, empty=not requests)
            tenants.took(taken, empty=not calls.order)
            if requests and taken < room:
                break
        batch.sort(key=lambda r: -r.num_tokens)  # equal lengths side by side: attention needs less padding
        return batch

    def _schedule_sharing(self) -> list[Request]:
        """:meth:`schedule` where a shared prefix counts once against the budget (request by request)."""
        batch: list[Request] = []
        tokens = BatchTokens(self.counts_shared)
        while self.tenants.order and len(batch) < self.max_seqs:
            calls = self.tenants.queues[self.tenants.order[0]]
            requests = calls.queues[calls.order[0]]
            if batch and tokens.with_request(requests[0])[0] > self.max_tokens:
                break
            batch.append(requests.popleft())
            tokens.add(batch[-1])
            calls.took(batch[-1].num_tokens, empty=not requests)
            self.tenants.took(batch[-1].num_tokens, empty=not calls.order)
        batch.sort(key=lambda r: -r.num_tokens)
        return batch

    def drop(self, call_id: int | None) -> int:
        """Remove the waiting requests of call ``call_id`` (a cancelled call); return how many."""
        for tenant, calls in self.tenants.queues.items():
            if call_id in calls.queues:
                dropped = len(calls.remove(call_id))
                if not calls.queues:
                    self.tenants.remove(tenant)
                return dropped
        return 0

    def clear(self) -> None:
        """Drop every queued request (after a failure)."""
        self.tenants = _Turns(TENANT_QUANTUM)
