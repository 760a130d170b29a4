"""Shared prefixes: requests of one batch that begin with the same tokens attend to one copy of them.

An LLM reranker repeats its instruction and the query before every document of a ``rerank`` call. With causal
attention those tokens' states do not depend on what follows, so the batch holds them once: the group's first
request keeps its whole prompt, every other member keeps only its own tokens (positions continuing after the
prefix), and its attention reads the prefix's keys and values from the first request's rows
(:class:`~wde_core.attention.base.SharedKeys`). No cache outlives the batch. A tokenizer stage marks the requests
that may share with :attr:`Request.shared_prefix` (the same key: the same leading text); the longest common
prefix of their token ids, computed here, is what is shared.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from wde_core.attention.base import SharedKeys
from wde_core.stages.request import Request

MIN_SHARED_TOKENS = 16  # shorter common prefixes are not worth the gathered keys


def shares_prefixes(pipeline) -> bool:
    """Whether this pipeline's batches hold shared prefixes once: causal attention, last-token pooling (the
    prefix's own states are pooled by no one else) and an attention backend with ``supports_shared_prefix``."""
    settings = pipeline.settings
    if not (settings.causal and settings.pooling == "last"):
        return False
    return bool(getattr(pipeline.components["attention_backend"].load(), "supports_shared_prefix", False))


def plan_shared_prefixes(requests: list[Request]) -> list[tuple[int, int]] | None:
    """For each request ``(holder, skipped)``: the batch index of the request whose rows hold its first ``skipped``
    tokens (its own index and 0 when it shares nothing); ``None`` when no request shares."""
    groups: dict[str, list[int]] = {}
    for i, request in enumerate(requests):
        if request.shared_prefix is not None:
            groups.setdefault(request.shared_prefix, []).append(i)
    plan = [(i, 0) for i in range(len(requests))]
    for members in groups.values():
        if len(members) < 2:
            continue
        token_lists = [requests[i].token_ids for i in members]
        shared = min(len(os.path.commonprefix(token_lists)), min(map(len, token_lists)) - 1)  # last token: own
        if shared >= MIN_SHARED_TOKENS:
            for i in members[1:]:
                plan[i] = (members[0], shared)
    return plan if any(skipped for _, skipped in plan) else None


def shared_keys(plan: list[tuple[int, int]], cu_seqlens: list[int]) -> SharedKeys:
    """Each sequence's key rows: the holder's first ``skipped`` rows, then its own."""
    ranges = []
    for s, (holder, skipped) in enumerate(plan):
        own = (cu_seqlens[s], cu_seqlens[s + 1])
        ranges.append([(cu_seqlens[holder], cu_seqlens[holder] + skipped), own] if skipped else [own])
    return SharedKeys.of(ranges)


@dataclass(frozen=True)
class _Group:
    """One shared-prefix key's requests in a batch being formed: the first one's tokens, what all share so far."""

    first: list[int]
    shared: int
    count: int
    total: int

    def tokens(self) -> int:
        """What the builder will pack for them."""
        return self.total - (self.count - 1) * self.shared if self.shared >= MIN_SHARED_TOKENS else self.total


class BatchTokens:
    """The tokens a batch will hold once its shared prefixes are planned (as :func:`plan_shared_prefixes` does),
    kept as requests join: what the scheduler holds against its token budget (every token when not ``sharing``)."""

    def __init__(self, sharing: bool) -> None:
        self.total = 0
        self.sharing = sharing
        self.groups: dict[str, _Group] = {}

    def with_request(self, request: Request) -> tuple[int, _Group | None]:
        """The batch's tokens (an image input's vision tokens included) if ``request`` joined, and its group's new
        state."""
        key, total = request.shared_prefix, self.total + request.vision_tokens
        if key is None or not self.sharing:
            return total + request.num_tokens, None
        group = self.groups.get(key)
        if group is None:
            return total + request.num_tokens, _Group(request.token_ids, request.num_tokens - 1, 1, request.num_tokens)
        common = len(os.path.commonprefix([group.first, request.token_ids]))
        joined = _Group(group.first, min(group.shared, common, request.num_tokens - 1), group.count + 1,
                        group.total + request.num_tokens)
        return total - group.tokens() + joined.tokens(), joined

    def add(self, request: Request) -> None:
        """``request`` joins the batch."""
        self.total, group = self.with_request(request)
        if group is not None:
            self.groups[request.shared_prefix] = group
