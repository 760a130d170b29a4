"""The link's ``configure`` step: causal or bidirectional attention, and the limits a decoder's
config puts on the settings (sliding window, RoPE type).

Causal or bidirectional, first answer wins: the engine argument ``enable_bidirectional``; a field
of ``config.json`` (``is_causal: false`` and its equivalents); a known-model rule matched on the
model's name or path; causal.
"""

from __future__ import annotations

import json
from pathlib import Path

from wde_core.plugin_api import rope_type
from wde_qwen2_bidir.tokenizer import asks_for_eos

# config.json field -> the value that means bidirectional attention
CONFIG_FIELDS = (
    ("is_causal", False),  # transformers >= 5 (create_causal_mask), vLLM and TEI read it
    ("bidirectional", True),
    ("use_bidirectional_attention", True),  # EmbeddingGemma-style configs
    ("enable_bidirectional", True),
)
# (lower-case name fragment, bidirectional, why); used only when the engine argument and config are silent
KNOWN_MODELS = (
    ("gte-qwen2-7b-instruct", True, "gte-Qwen2-7B-instruct was trained with bidirectional attention"),
    ("gte-qwen1.5-7b-instruct", True, "gte-Qwen1.5-7B-instruct was trained with bidirectional attention"),
    ("gte-qwen2-1.5b-instruct", True, ("gte-Qwen2-1.5B-instruct: bidirectional as its model card, TEI and "
                                       "vLLM have it (some older references ran it causally; pass "
                                       "enable_bidirectional=False for those)")),
)


def configure(propose, directory, args) -> None:
    """Propose causal or bidirectional attention (with why), cap the length at a sliding window, check RoPE,
    and note whether inputs end with EOS."""
    rope_type(directory.config)  # refuse an unsupported RoPE before any weight is read
    bidirectional, why = decide_bidirectional(directory, args)
    propose.suggest("causal", not bidirectional, why)
    window = sliding_window(directory.config)
    if window is not None:
        propose.length_limit = (window, f"the model's sliding window of {window} tokens, which wde does not "
                                        "implement (longer inputs would attend beyond it)")
    if asks_for_eos(directory.path):
        propose.notes["eos"] = "tokenizer_config.json add_eos_token=true: every input ends with EOS"


def decide_bidirectional(directory, args) -> tuple[bool, str]:
    """``(bidirectional, why)``: engine argument > config.json field > known model > causal."""
    flag = getattr(args, "enable_bidirectional", None)
    if flag is not None:
        return bool(flag), f"engine argument enable_bidirectional={flag}"
    raw = read_config_json(directory.path)
    for name, means_bidirectional in CONFIG_FIELDS:
        value = raw.get(name)
        if value is None:
            continue
        if not isinstance(value, bool):
            raise ValueError(f"model {directory.name!r}: config.json {name}={value!r} is not a boolean")
        return value == means_bidirectional, f"config.json {name}={json.dumps(value)}"
    known = known_model_rule(directory, raw)
    if known is not None:
        return known
    return False, "no engine argument, config.json field or known-model rule; decoders default to causal"


def known_model_rule(directory, raw: dict) -> tuple[bool, str] | None:
    """The rule of a known model whose name appears in the model id, path or ``_name_or_path``."""
    names = [str(directory.name), str(directory.path), str(raw.get("_name_or_path") or "")]
    for fragment, bidirectional, why in KNOWN_MODELS:
        for name in names:
            if fragment in name.lower():
                return bidirectional, f"known model ({fragment!r} in {name!r}): {why}"
    return None


def read_config_json(path: Path) -> dict:
    """The model's ``config.json`` as written (no HF defaults filled in)."""
    config_file = Path(path) / "config.json"
    if not config_file.is_file():
        return {}
    with open(config_file, encoding="utf-8") as f:
        return json.load(f)


def sliding_window(config) -> int | None:
    """The attention window the model's layers use, or ``None`` when every layer attends fully."""
    window = getattr(config, "sliding_window", None)
    layer_types = getattr(config, "layer_types", None)
    if not window or (layer_types is not None and "sliding_attention" not in layer_types):
        return None
    return int(window)
