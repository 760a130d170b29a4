"""Model settings, decided once per pipeline. Each comes from the first source that has it: what the link's
``configure`` step requires (an engine argument that contradicts it is refused), the engine argument, what
``configure`` suggests, the model directory's sentence-transformers files and config, the link's ``defaults``,
the core's default; its source goes to ``reasons``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, TypedDict

from wde_core.plugins.entries import ArchitectureLink, import_target

PROPOSABLE = ("pooling", "normalize", "causal", "activation", "position_offset")


class Extras(TypedDict, total=False):
    """Decisions of a ``configure`` step for the plugin's own components (a plugin may add keys of its own)."""

    answer_token_ids: list[int]  # LLM rerankers: the vocabulary rows whose logits make the score


@dataclass
class Proposals:
    """What a link's ``configure(propose, directory, args)`` proposes before the decision: ``suggest`` ranks right
    after the engine argument, ``require`` refuses a contradicting one; ``length_limit = (tokens, why)`` caps
    ``max_model_len`` (refusing an engine argument above it); ``notes`` go to the reasons ``wde inspect`` prints;
    ``served_modules``: sentence-transformers module types (as modules.json names them) the core does not know and
    the plugin serves itself (SPLADE's pooling), else refused."""

    values: dict[str, tuple[Any, str, bool]] = field(default_factory=dict)
    length_limit: tuple[int, str] | None = None
    notes: dict[str, str] = field(default_factory=dict)
    extras: Extras = field(default_factory=dict)
    served_modules: set[str] = field(default_factory=set)  # modules.json types the plugin's own stages serve

    def suggest(self, name: str, value: Any, why: str, *, required: bool = False) -> None:
        """Propose ``value`` for setting ``name``; an engine argument still wins unless ``required``."""
        if name not in PROPOSABLE:
            raise ValueError(f"configure proposed {name!r}, not a setting it may propose ({', '.join(PROPOSABLE)})")
        self.values[name] = (value, why, required)

    def require(self, name: str, value: Any, why: str) -> None:
        """The model works only with ``value``: an engine argument asking otherwise is refused."""
        self.suggest(name, value, why, required=True)

    def first(self, name: str, args, link: ArchitectureLink) -> list[tuple[Any, str]]:
        """The candidates that rank first for ``name``: the required value, else the engine argument then the
        suggestion."""
        value, why, required = self.values.get(name, (None, "", False))
        asked = getattr(args, name, None)
        if required and asked is not None and asked != value:
            raise ValueError(f"engine argument {name}={asked!r} contradicts {link.provider}'s {link.architecture}: "
                             f"{name}={value!r} ({why})")
        return [(value, why)] if required else [(asked, f"engine argument {name}"), (value, why)]


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
    extras: Extras = field(default_factory=dict)


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
    propose = Proposals()
    if link.configure is not None:
        import_target(link.configure)(propose, directory, args)
    if unsupported := [module for module in st.unsupported_modules if module not in propose.served_modules]:
        raise ValueError(f"model {directory.name!r}: unsupported sentence-transformers modules: "
                         f"{', '.join(unsupported)}")
    plugin = f"default of {link.provider}"

    def decide(name: str, *sources: tuple[Any, str], core: Any) -> Any:
        return pick(name, reasons, *propose.first(name, args, link), *sources, (defaults.get(name), plugin),
                    (core, "core default"))

    pooling = decide("pooling", (st.pooling, "1_Pooling/config.json"), core="cls")
    has_normalize = f"modules.json ({'Normalize module' if st.normalize else 'no Normalize'})"
    normalize = decide("normalize", (st.normalize, has_normalize), core=False)
    offset = int(decide("position_offset", core=0))
    max_len = _max_model_len(directory, args, offset, propose.length_limit, reasons,
                             (defaults.get("max_model_len"), plugin))
    causal = bool(decide("causal", core=False))
    reasons["causal"] = f"{'causal' if causal else 'bidirectional'} attention: {reasons['causal']}"
    if st.dense:
        reasons["dense"] = "modules.json: " + ", ".join(
            f"{d['in_features']}->{d['out_features']} {d['activation_function']}" for d in st.dense) + " after pooling"
    activation = decide("activation", core=None) if "activation" in propose.values or "activation" in defaults else None
    reasons.update(propose.notes)
    return ModelSettings(pooling, normalize, max_len, st.prompts, st.default_prompt_name, st.include_prompt, causal,
                         offset, activation, propose.extras)


def _max_model_len(directory, args, offset: int, cap: tuple[int, str] | None, reasons: dict[str, str],
                   plugin_default: tuple[Any, str]) -> int:
    """As sentence-transformers: the smaller of the tokenizer's and the positions', capped at a plugin's limit."""
    st, config = directory.st, directory.config
    positions = int(getattr(config, "max_position_embeddings", 0) or 0)  # 0: a nested config's (the plugin caps)
    limit = positions - offset if positions else None
    tokenizer = st.tokenizer_max_length if limit is None or (st.tokenizer_max_length or limit) < limit else None
    max_len = pick("max_model_len", reasons, (args.max_model_len, "engine argument max_model_len"),
                   (st.max_seq_length, "sentence_bert_config.json"),
                   (tokenizer, "tokenizer_config.json model_max_length"),
                   (limit, "config.json max_position_embeddings"), plugin_default)
    if limit is not None and max_len > limit:
        raise ValueError(f"engine argument max_model_len={max_len} exceeds the model's {limit} positions")
    if cap is not None and max_len > cap[0]:
        if args.max_model_len is not None:
            raise ValueError(f"engine argument max_model_len={max_len} exceeds {cap[1]}; pass max_model_len <= {cap[0]}")
        max_len, reasons["max_model_len"] = cap[0], f"{reasons['max_model_len']}, capped at {cap[1]}"
    return max_len
