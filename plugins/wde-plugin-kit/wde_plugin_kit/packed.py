"""Parity on packed batches: random requests, HF's per-sequence token states for them (right-padded, attention
mask) and wde's for the same requests packed into one batch (``packed_diff``: the largest difference)."""

from __future__ import annotations

import torch

from wde_core.plugin_api import Request


def random_requests(config, lengths, seed=0, *, lowest_id=0, with_types=True) -> list[Request]:
    """Requests of the given lengths with random token ids (from ``lowest_id``) and, where the model has
    several token types and ``with_types``, random token types."""
    gen = torch.Generator().manual_seed(seed)
    typed = with_types and getattr(config, "type_vocab_size", 1) > 1
    requests = []
    for i, n in enumerate(lengths):
        ids = torch.randint(lowest_id, config.vocab_size, (n,), generator=gen).tolist()
        types = torch.randint(0, config.type_vocab_size, (n,), generator=gen).tolist() if typed else None
        requests.append(Request(index=i, text="", token_ids=ids, token_type_ids=types))
    return requests


def reference_states(reference, requests: list[Request], *, pad_id: int = 0) -> list[torch.Tensor]:
    """HF last hidden states of each request (right-padded with ``pad_id``, attention mask), unpadded."""
    longest = max(r.num_tokens for r in requests)
    ids = torch.full((len(requests), longest), pad_id, dtype=torch.long)
    types = torch.zeros_like(ids)
    mask = torch.zeros_like(ids)
    for b, r in enumerate(requests):
        ids[b, : r.num_tokens] = torch.tensor(r.token_ids)
        if r.token_type_ids is not None:
            types[b, : r.num_tokens] = torch.tensor(r.token_type_ids)
        mask[b, : r.num_tokens] = 1
    typed = {"token_type_ids": types} if any(r.token_type_ids is not None for r in requests) else {}
    with torch.no_grad():
        out = reference(input_ids=ids, attention_mask=mask, **typed).last_hidden_state
    return [out[b, : r.num_tokens] for b, r in enumerate(requests)]


def wde_states(engine, requests: list[Request]) -> list[torch.Tensor]:
    """wde's token states for the requests, packed into one batch."""
    model_input = engine.builder.build(requests)
    with torch.inference_mode():
        hidden = engine.executor.worker.model(model_input)
    return list(torch.split(hidden, model_input.seq_lens))


def packed_diff(engine, reference, requests: list[Request], *, pad_id: int = 0) -> float:
    """Max abs difference of wde's token states (the requests packed into one batch) from HF's."""
    diffs = []
    for mine, theirs in zip(wde_states(engine, requests), reference_states(reference, requests, pad_id=pad_id)):
        assert mine.shape == theirs.shape
        diffs.append((mine - theirs).abs().max().item())
    return max(diffs)
