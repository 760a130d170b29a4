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
    """HF ``last_hidden_state`` of each text, one text at a time (no padding), truncated to ``max_len``; a model that
    does not run as an encoder on the tokenizer's inputs (``AutoModel`` picks ``T5Model``, decoder included, for a T5
    config) raises ``ValueError`` saying to pass the right reference as ``hf_model=``."""
    import torch

    states = []
    for text in texts:
        encoded = tokenizer(text, truncation=True, max_length=max_len, return_tensors="pt")
        inputs = {k: v for k, v in encoded.items() if k in ("input_ids", "token_type_ids", "attention_mask")}
        with torch.inference_mode():
            try:
                output = hf_model(**inputs)
            except (ValueError, TypeError) as exc:
                raise ValueError(f"the HF reference {type(hf_model).__name__} does not run as an encoder of "
                                 f"{sorted(inputs)} ({exc}): AutoModel is the wrong reference for this config; "
                                 "pass the model to compare with as hf_model= (e.g. T5EncoderModel.from_pretrained("
                                 "model_dir) for a T5 encoder)") from exc
            states.append(output.last_hidden_state[0].float().numpy())
    return states


def _row_cosines(ours: np.ndarray, theirs: np.ndarray) -> np.ndarray:
    """Cosine of each row (each token, or the one pooled vector) of ``ours`` with ``theirs``' (two zero rows: 1)."""
    ours, theirs = np.atleast_2d(ours).astype(np.float64), np.atleast_2d(theirs).astype(np.float64)
    ours_norm, theirs_norm = np.linalg.norm(ours, axis=-1), np.linalg.norm(theirs, axis=-1)
    cosines = np.sum(ours * theirs, axis=-1) / np.maximum(ours_norm * theirs_norm, 1e-30)
    return np.where((ours_norm == 0) & (theirs_norm == 0), 1.0, cosines)


def _text_stats(ours, theirs, backend: str, what: str, index: int) -> tuple[float, float]:
    """``(max abs diff, min cosine)`` of one text's arrays; raises ``AssertionError`` on a shape mismatch."""
    ours, theirs = np.asarray(ours, dtype=np.float32), np.asarray(theirs, dtype=np.float32)
    if ours.shape != theirs.shape:
        raise AssertionError(f"backend {backend!r}: {what} of text {index} have shape {ours.shape}, "
                             f"HF gives {theirs.shape}")
    if not ours.size:
        return 0.0, 1.0
    return float(np.max(np.abs(ours - theirs))), float(np.min(_row_cosines(ours, theirs)))


def _check(stats: list[tuple[float, float]], where: str, what: str, atol: float | None,
           min_cosine: float | None) -> tuple[float, float]:
    """The worst ``(max abs diff, min cosine)`` over the texts; raises ``AssertionError`` reporting both when
    one is out of bounds."""
    if not stats:
        return 0.0, 1.0
    worst_diff = max(range(len(stats)), key=lambda i: stats[i][0])
    worst_cos = min(range(len(stats)), key=lambda i: stats[i][1])
    diff, cosine = stats[worst_diff][0], stats[worst_cos][1]
    too_far = atol is not None and not diff <= atol
    too_unlike = min_cosine is not None and not cosine >= min_cosine
    if too_far or too_unlike:
        raise AssertionError(
            f"{where}: {what} differ from HF: max abs diff {diff:.3g} (text {worst_diff})"
            + (f" > atol {atol:g}" if too_far else "") + f", min cosine {cosine:.6f} (text {worst_cos})"
            + (f" < min_cosine {min_cosine:g}" if too_unlike else ""))
    return diff, cosine


def _tolerances(dtype: str, atol: float | None, min_cosine: float | None) -> tuple[float | None, float | None]:
    """float32 defaults to ``atol=1e-4``; a lower precision needs the caller to state ``atol`` or ``min_cosine``."""
    if atol is None and min_cosine is None:
        if dtype != "float32":
            raise ValueError(f"assert_matches_hf(dtype={dtype!r}): state the tolerance for this precision, "
                             f"atol=... and/or min_cosine=... (only float32 has a default, atol=1e-4)")
        atol = 1e-4
    return atol, min_cosine


def _run_wde(model_dir: Path, texts: list[str], backend: str, dtype: str, engine_args: dict) -> tuple:
    """``(settings, token states, pooled outputs)`` of a CPU engine with ``backend`` in ``dtype``, unnormalized."""
    from wde_core.plugin_api import Engine

    engine = Engine(str(model_dir), device="cpu", dtype=dtype, attention_backend=backend, **engine_args)
    try:
        settings = engine.pipeline.settings
        states, pooled = engine.embed_tokens(texts, normalize=False), engine.encode(texts, normalize=False)
    finally:
        engine.close()
    if len(states) != len(texts) or len(pooled) != len(texts):
        raise AssertionError(f"backend {backend!r}: wde returned {len(states)} token-state arrays and "
                             f"{len(pooled)} pooled vectors for {len(texts)} texts")
    return settings, states, pooled


def assert_matches_hf(model_dir, texts: Sequence[str], *, hf_model: Any = None, dtype: Any = "float32",
                      atol: float | None = None, min_cosine: float | None = None,
                      attention_backends: Sequence[str] = ("torch_sdpa", "eager"), **engine_args: Any) -> dict:
    """Compare wde's token states and pooled outputs, computed in ``dtype`` on the CPU, with the (float32) HF
    model's for each attention backend: returns ``{backend: {"token_states": max abs diff, "pooled": ...,
    "token_states_min_cosine": ..., "pooled_min_cosine": ...}}``, raises ``AssertionError`` naming a misfit."""
    from transformers import AutoTokenizer

    from wde_core.plugin_api import prompt_token_count

    dtype = str(dtype).removeprefix("torch.")
    atol, min_cosine = _tolerances(dtype, atol, min_cosine)
    model_dir, texts = Path(model_dir), list(texts)
    hf_model = hf_model if hf_model is not None else load_hf_model(model_dir)
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    reference: dict[tuple, list[np.ndarray]] = {}
    report: dict[str, dict[str, float]] = {}
    for backend in attention_backends:
        settings, ours_states, ours_pooled = _run_wde(model_dir, texts, backend, dtype, engine_args)
        prompt = settings.prompts.get(settings.default_prompt_name) if settings.default_prompt_name else None
        key = (settings.max_model_len, prompt)
        if key not in reference:
            reference[key] = hf_token_states(hf_model, tokenizer, [(prompt or "") + t for t in texts],
                                             settings.max_model_len)
        theirs = reference[key]
        start = prompt_token_count(tokenizer, prompt) if prompt and not settings.include_prompt else 0
        where, pooled_what = f"backend {backend!r}, dtype {dtype}", f"pooled outputs ({settings.pooling})"
        token_stats = [_text_stats(o, t, backend, "token states", i)
                       for i, (o, t) in enumerate(zip(ours_states, theirs))]
        pooled_stats = [_text_stats(o, _pool(t, settings.pooling, min(start, len(t) - 1)), backend, pooled_what, i)
                        for i, (o, t) in enumerate(zip(ours_pooled, theirs))]
        token_diff, token_cos = _check(token_stats, where, "token states", atol, min_cosine)
        pooled_diff, pooled_cos = _check(pooled_stats, where, pooled_what, atol, min_cosine)
        report[backend] = {"token_states": token_diff, "pooled": pooled_diff,
                           "token_states_min_cosine": token_cos, "pooled_min_cosine": pooled_cos}
    return report
