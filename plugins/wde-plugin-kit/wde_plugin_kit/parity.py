"""Parity of wde's token states and pooled outputs with the HF model's, per attention backend."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import numpy as np


def _pool(states: np.ndarray, pooling: str, start: int) -> np.ndarray:
    """Pool one sequence's states ``[n, H]`` as wde does; ``start`` skips an excluded prompt (mean, max)."""
    if pooling == "cls":
        return states[0]
    if pooling == "last":
        return states[-1]
    if pooling == "mean":
        return states[start:].astype(np.float64).mean(axis=0)
    if pooling == "max":
        return states[start:].max(axis=0)
    raise ValueError(f"assert_matches_hf: pooling {pooling!r} is not one of cls, mean, last, max")


def load_hf_model(model_dir) -> Any:
    """The HF reference: ``AutoModel`` with eager attention, float32, eval mode."""
    import torch
    from transformers import AutoModel

    return AutoModel.from_pretrained(str(model_dir), attn_implementation="eager", dtype=torch.float32).eval()


def hf_token_states(hf_model, tokenizer, texts: Sequence[str], max_len: int) -> list[np.ndarray]:
    """HF ``last_hidden_state`` of each text, one text at a time (no padding), truncated to ``max_len``."""
    import torch

    states = []
    for text in texts:
        encoded = tokenizer(text, truncation=True, max_length=max_len, return_tensors="pt")
        inputs = {k: v for k, v in encoded.items() if k in ("input_ids", "token_type_ids", "attention_mask")}
        with torch.inference_mode():
            states.append(hf_model(**inputs).last_hidden_state[0].float().numpy())
    return states


def _max_diff(ours, theirs, backend: str, what: str, index: int, atol: float) -> float:
    """Max abs difference of two arrays; raises ``AssertionError`` on a shape mismatch or above ``atol``."""
    ours, theirs = np.asarray(ours, dtype=np.float32), np.asarray(theirs, dtype=np.float32)
    if ours.shape != theirs.shape:
        raise AssertionError(f"backend {backend!r}: {what} of text {index} have shape {ours.shape}, "
                             f"HF gives {theirs.shape}")
    diff = float(np.max(np.abs(ours - theirs))) if ours.size else 0.0
    if not diff <= atol:
        raise AssertionError(f"backend {backend!r}: {what} of text {index} differ from HF: "
                             f"max abs diff {diff:.3g} > atol {atol:g}")
    return diff


def assert_matches_hf(model_dir, texts: Sequence[str], *, hf_model: Any = None, atol: float = 1e-4,
                      attention_backends: Sequence[str] = ("torch_sdpa", "eager"), **engine_args: Any) -> dict:
    """Compare wde's token states and pooled outputs with the HF model's for each attention backend: returns
    ``{backend: {"token_states": diff, "pooled": diff}}`` (max abs), raises ``AssertionError`` naming a misfit."""
    from transformers import AutoTokenizer

    from wde_core.plugin_api import Engine, prompt_token_count

    model_dir = Path(model_dir)
    texts = list(texts)
    hf_model = hf_model if hf_model is not None else load_hf_model(model_dir)
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    reference: dict[tuple, list[np.ndarray]] = {}
    report: dict[str, dict[str, float]] = {}
    for backend in attention_backends:
        engine = Engine(str(model_dir), device="cpu", dtype="float32", attention_backend=backend, **engine_args)
        try:
            settings = engine.pipeline.settings
            prompt = settings.prompts.get(settings.default_prompt_name) if settings.default_prompt_name else None
            key = (settings.max_model_len, prompt)
            if key not in reference:
                reference[key] = hf_token_states(hf_model, tokenizer, [(prompt or "") + t for t in texts],
                                                 settings.max_model_len)
            theirs = reference[key]
            start = prompt_token_count(tokenizer, prompt) if prompt and not settings.include_prompt else 0
            ours_states = engine.embed_tokens(texts, normalize=False)
            ours_pooled = engine.encode(texts, normalize=False)
        finally:
            engine.close()
        if len(ours_states) != len(texts) or len(ours_pooled) != len(texts):
            raise AssertionError(f"backend {backend!r}: wde returned {len(ours_states)} token-state arrays and "
                                 f"{len(ours_pooled)} pooled vectors for {len(texts)} texts")
        token_diff = max((_max_diff(o, t, backend, "token states", i, atol)
                          for i, (o, t) in enumerate(zip(ours_states, theirs))), default=0.0)
        pooled_diff = max((_max_diff(o, _pool(t, settings.pooling, min(start, len(t) - 1)), backend,
                                     f"pooled outputs ({settings.pooling})", i, atol)
                           for i, (o, t) in enumerate(zip(ours_pooled, theirs))), default=0.0)
        report[backend] = {"token_states": token_diff, "pooled": pooled_diff}
    return report
