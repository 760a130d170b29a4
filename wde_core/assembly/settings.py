"""Model settings, decided once per pipeline: each from the engine argument, the model directory's
sentence-transformers files and config, the link's ``defaults`` or the core's default, its source in
``reasons``; a link's ``configure`` function may refine them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from wde_core.plugins.entries import ArchitectureLink, import_target


@dataclass
class ModelSettings:
    """Typed model settings, each with its source in ``Pipeline.reasons``: ``position_offset`` is added to every
    position (XLM-R: ``padding_idx + 1``), ``activation`` applies to a classification head's logits, ``extras``
    holds a plugin's ``configure`` decisions."""

    pooling: str
    normalize: bool
    max_model_len: int
    prompts: dict[str, str] = field(default_factory=dict)
    default_prompt_name: str | None = None
    include_prompt: bool = True
    causal: bool = False
    position_offset: int = 0
    activation: str | None = None
    extras: dict[str, Any] = field(default_factory=dict)


def pick(name: str, reasons: dict[str, str], *candidates: tuple[Any, str]) -> Any:
    """The first candidate value that is not ``None``, its source recorded in ``reasons[name]``."""
    for value, why in candidates:
        if value is not None:
            reasons[name] = why
            return value
    raise ValueError(f"cannot tell the model's {name}; pass it as an engine argument")


def decide_model_settings(directory, link: ArchitectureLink, args, reasons: dict[str, str]) -> ModelSettings:
    """Decide every setting for ``directory`` served through ``link`` with engine arguments ``args``."""
    st, config, defaults = directory.st, directory.config, dict(link.defaults)
    if st.unsupported_modules:
        raise ValueError(f"model {directory.name!r}: unsupported sentence-transformers modules: "
                         f"{', '.join(st.unsupported_modules)}")
    plugin = f"default of {link.provider}"
    pooling = pick("pooling", reasons, (args.pooling, "engine argument pooling"),
                   (st.pooling, "1_Pooling/config.json"), (defaults.get("pooling"), plugin), ("cls", "core default"))
    normalize = pick("normalize", reasons, (args.normalize, "engine argument normalize"),
                     (st.normalize, f"modules.json ({'Normalize module' if st.normalize else 'no Normalize'})"),
                     (defaults.get("normalize"), plugin), (False, "core default"))
    offset = int(pick("position_offset", reasons, (defaults.get("position_offset"), plugin), (0, "core default")))
    limit = int(getattr(config, "max_position_embeddings", 0) or 0) - offset or None
    tokenizer = st.tokenizer_max_length if limit is None or (st.tokenizer_max_length or limit) < limit else None
    max_len = pick("max_model_len", reasons, (args.max_model_len, "engine argument max_model_len"),
                   (st.max_seq_length, "sentence_bert_config.json"),  # as sentence-transformers: the smaller of
                   (tokenizer, "tokenizer_config.json model_max_length"),  # the tokenizer's and the positions
                   (limit, "config.json max_position_embeddings"), (defaults.get("max_model_len"), plugin))
    if limit is not None and max_len > limit:
        raise ValueError(f"engine argument max_model_len={max_len} exceeds the model's {limit} positions")
    causal = bool(pick("causal", reasons, (defaults.get("causal"), plugin), (False, "core default")))
    reasons["causal"] = f"{'causal' if causal else 'bidirectional'} attention: {reasons['causal']}"
    if st.dense:
        reasons["dense"] = "modules.json: " + ", ".join(
            f"{d['in_features']}->{d['out_features']} {d['activation_function']}" for d in st.dense) + " after pooling"
    activation = defaults.get("activation")
    if activation is not None:
        reasons["activation"] = plugin
    settings = ModelSettings(pooling, normalize, max_len, st.prompts, st.default_prompt_name, st.include_prompt,
                             causal, offset, activation)
    if link.configure is not None:
        import_target(link.configure)(settings, directory, args, reasons)
    return settings
