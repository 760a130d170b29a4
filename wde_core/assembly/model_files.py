"""Finding a model directory (local, a registered local copy, or the hub: cache first, then a download unless
``HF_HUB_OFFLINE`` is set) and reading what it says, without loading any weights."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wde_core.assembly.engine_args import POOLINGS
from wde_core.plugins.registry import Registry

# sentence-transformers' 1_Pooling/config.json keys, in the order of POOLINGS (cls, mean, last, max)
POOLING_MODES = dict(zip(("pooling_mode_cls_token", "pooling_mode_mean_tokens", "pooling_mode_lasttoken",
                          "pooling_mode_max_tokens"), POOLINGS))
_ST6_POOLING = {"cls": "pooling_mode_cls_token", "mean": "pooling_mode_mean_tokens",
                "max": "pooling_mode_max_tokens", "lasttoken": "pooling_mode_lasttoken"}
_SUPPORTED_MODULES = ("Transformer", "Pooling", "Dense", "Normalize")
_DENSE_ACTIVATIONS = ("Identity", "Tanh", "ReLU", "GELU", "Sigmoid", "SiLU")
HUB_PATTERNS = ["*.json", "*.safetensors", "*.bin", "*.txt", "*.model", "*.pt", "1_Pooling/*", "*_Dense/*"]
SIZE_FIELDS = ("vocab_size", "hidden_size", "num_hidden_layers", "intermediate_size", "num_attention_heads",
               "num_key_value_heads", "head_dim", "max_position_embeddings")


class ModelNotFoundError(FileNotFoundError):
    """The model is neither a local directory, a registered local copy, nor on the hub."""


@dataclass
class SentenceTransformerFiles:
    """What the sentence-transformers files of a model directory say (``None`` where silent)."""

    pooling: str | None = None
    include_prompt: bool = True
    normalize: bool | None = None
    max_seq_length: int | None = None
    tokenizer_max_length: int | None = None  # tokenizer_config.json model_max_length (sentence-transformers >= 6)
    prompts: dict[str, str] = field(default_factory=dict)
    default_prompt_name: str | None = None
    dense: list[dict] = field(default_factory=list)  # each Dense module's config.json, with its "path"
    unsupported_modules: list[str] = field(default_factory=list)


@dataclass
class ModelDirectory:
    """A resolved model: where it lives, how it was found, its HF config and ST files."""

    name: str
    path: Path
    found_by: str
    config: Any
    st: SentenceTransformerFiles

    @property
    def architectures(self) -> list[str]:
        """The architectures ``config.json`` lists."""
        return list(getattr(self.config, "architectures", None) or [])

    @property
    def embedding_size(self) -> int | None:
        """The size of a pooled embedding: the last ``Dense`` module's output, else the hidden size."""
        return self.st.dense[-1]["out_features"] if self.st.dense else getattr(self.config, "hidden_size", None)


def open_model_directory(model: str, registry: Registry, revision: str | None = None) -> ModelDirectory:
    """Resolve ``model`` to a directory and read its config and sentence-transformers files."""
    root, found_by = resolve_model_path(model, registry, revision)
    path = router_route_folder(root)
    if not (path / "config.json").is_file():
        raise ModelNotFoundError(f"model {model!r}: {path} has no config.json")
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(str(path))
    except Exception as exc:  # noqa: BLE001 - bad JSON, unknown model_type, transformers' strict field types
        raise ValueError(f"model {model!r}: cannot read {path / 'config.json'}: {exc}") from exc
    check_config_sizes(f"model {model!r}: {path / 'config.json'}", config, path)
    return ModelDirectory(model, path, found_by, config, read_sentence_transformer_files(root))


def router_route_folder(path: Path) -> Path:
    """``path``, or for a sentence-transformers ``Router`` directory with no config.json of its own, the one route
    module folder with an HF config.json (weights and tokenizer live there; modules.json, naming the Router, stays
    at ``path``)."""
    routes = (_read_json(path / "router_config.json") or {}).get("types", {})
    found = [path / name for name in routes if "model_type" in (_read_json(path / name / "config.json") or {})]
    return found[0] if len(found) == 1 and not (path / "config.json").is_file() else path


def check_config_sizes(where: str, config: Any, path: Path) -> None:
    """Refuse a config whose sizes cannot build a working model, or imply far more weights than ``path`` holds."""
    raw, names = _read_json(path / "config.json") or {}, getattr(config, "attribute_map", {})  # GPT-2: n_embd
    size = {key: raw.get(names.get(key, key)) for key in SIZE_FIELDS}  # as written: not transformers' defaults
    if bad := next((k for k, v in size.items() if v is not None and (type(v) is not int or v <= 0)), None):
        raise ValueError(f"{where}: {bad}={size[bad]!r}: a size must be a positive integer")
    vocab, hidden, layers, inner, heads, kv_heads, _, _ = (size[key] or 0 for key in SIZE_FIELDS)
    if heads and hidden % heads and not any(getattr(config, k, None) for k in ("head_dim", "attention_head_size")):
        raise ValueError(f"{where}: hidden_size={hidden} is not a multiple of num_attention_heads={heads} and no "
                         "head_dim is given: the hidden state cannot be split into equal attention heads")
    if heads and kv_heads and heads % kv_heads:
        raise ValueError(f"{where}: num_attention_heads={heads} is not a multiple of num_key_value_heads={kv_heads}: "
                         "the query heads cannot share the key/value heads evenly")
    # the weight files' bytes on disk (none read); refused: over 4 parameters a byte (2x 4-bit weights) and 64M
    held = sum(f.stat().st_size for f in path.iterdir() if f.suffix in (".safetensors", ".bin") and f.is_file())
    params = vocab * hidden + layers * (4 * hidden * hidden + 2 * hidden * (inner or 4 * hidden))
    if held and params > 4 * held + 2**26:  # no weights at all (``wde inspect`` of a bare config): loading says so
        named = ", ".join(f"{key}={size[key]}" for key in SIZE_FIELDS[:4] if size[key] is not None)
        raise ValueError(f"{where}: {named} imply ~{params:.2g} parameters ({2 * params / 1e9:.3g} GB in float16), "
                         f"but the weight files hold {held / 1e6:,.1f} MB: the config does not match the weights")


def resolve_model_path(model: str, registry: Registry, revision: str | None = None) -> tuple[Path, str]:
    """Return ``(directory, how it was found)`` for a local path or hub id."""
    local = Path(model).expanduser()
    if local.is_dir():
        return local.resolve(), "local directory"
    source = registry.model_sources.get(model)
    if source is not None:
        found = source.resolve()
        if found is not None and Path(found).is_dir():
            return Path(found), f"local copy registered by {source.provider}"
    return _from_hub(model, revision)


def _from_hub(model: str, revision: str | None) -> tuple[Path, str]:
    import huggingface_hub
    from huggingface_hub.utils import HFValidationError

    try:
        path = huggingface_hub.snapshot_download(model, revision=revision, local_files_only=True)
        return Path(path), "hub cache"
    except HFValidationError:
        raise ModelNotFoundError(f"model {model!r} is neither a directory nor a valid hub id") from None
    except Exception:  # noqa: BLE001 - not cached: try the hub below
        pass
    try:
        path = huggingface_hub.snapshot_download(model, revision=revision, allow_patterns=HUB_PATTERNS)
    except Exception as exc:  # noqa: BLE001 - offline, unknown repo, no network
        raise ModelNotFoundError(f"model {model!r} is not a local directory, not a registered local copy, not in the "
                                 f"hub cache, and could not be downloaded: {type(exc).__name__}: {exc}") from None
    return Path(path), "downloaded from the hub"


def read_sentence_transformer_files(path: Path) -> SentenceTransformerFiles:
    """Read ``modules.json``, the pooling config, ``sentence_bert_config.json`` and prompts."""
    st = SentenceTransformerFiles()
    modules = _read_json(path / "modules.json") or []
    for module in modules:
        kind = module.get("type", "").rsplit(".", 1)[-1]
        if kind == "Pooling":
            _read_pooling(path / module.get("path", ""), st)
        elif kind == "Normalize":
            st.normalize = True
        elif kind == "Dense":
            _read_dense(path / module.get("path", ""), st)
        elif kind not in _SUPPORTED_MODULES:
            st.unsupported_modules.append(module.get("type", "?"))
    if modules and st.normalize is None:
        st.normalize = False
    bert_config = _read_json(path / "sentence_bert_config.json") or {}
    st.max_seq_length = bert_config.get("max_seq_length")
    limit = (_read_json(path / "tokenizer_config.json") or {}).get("model_max_length")
    st.tokenizer_max_length = limit if isinstance(limit, int) and limit < 1_000_000_000 else None  # 1e30: unset
    st_config = _read_json(path / "config_sentence_transformers.json") or {}
    st.prompts = dict(st_config.get("prompts") or {})
    st.default_prompt_name = st_config.get("default_prompt_name")
    return st


def _read_pooling(directory: Path, st: SentenceTransformerFiles) -> None:
    config = _read_json(directory / "config.json") or {}
    mode = config.get("pooling_mode")  # sentence-transformers >= 6 writes one name instead of flags
    if isinstance(mode, str):
        config[_ST6_POOLING.get(mode, f"pooling_mode_{mode}")] = True
    modes = [mode for key, mode in POOLING_MODES.items() if config.get(key)]
    others = [k for k, v in config.items() if k.startswith("pooling_mode_") and v and k not in POOLING_MODES]
    if len(modes) + len(others) > 1 or others:
        st.unsupported_modules.append(f"Pooling with {sorted(others + modes)}")
    elif modes:
        st.pooling = modes[0]
    st.include_prompt = bool(config.get("include_prompt", True))


def _read_dense(directory: Path, st: SentenceTransformerFiles) -> None:
    config = dict(_read_json(directory / "config.json") or {})
    # sentence-transformers' default activation is Tanh; it saves the class path, e.g. torch.nn...Identity
    activation = config.get("activation_function", "torch.nn.modules.activation.Tanh").rsplit(".", 1)[-1]
    flows = {config.get("module_input_name", "sentence_embedding"), config.get("module_output_name")} - {None}
    if not {"in_features", "out_features"} <= set(config):
        st.unsupported_modules.append(f"Dense ({directory.name}: no config.json with in_features and out_features)")
    elif activation not in _DENSE_ACTIVATIONS or flows != {"sentence_embedding"}:
        st.unsupported_modules.append(f"Dense ({directory.name}: activation {activation}, on {sorted(flows)})")
    else:
        st.dense.append({**config, "activation_function": activation, "path": str(directory)})


def _read_json(path: Path) -> Any:
    if not path.is_file():
        return None
    with open(path, encoding="utf-8") as f:
        return json.load(f)
