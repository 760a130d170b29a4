"""sentence-transformers files (modules, pooling, normalize, max length, prompts) for a model directory."""

from __future__ import annotations

import json
from pathlib import Path

POOLING_KEYS = {"cls": "pooling_mode_cls_token", "mean": "pooling_mode_mean_tokens", "max": "pooling_mode_max_tokens",
                "mean_sqrt_len": "pooling_mode_mean_sqrt_len_tokens",
                "weightedmean": "pooling_mode_weightedmean_tokens", "last": "pooling_mode_lasttoken"}
_MODULES = {"Transformer": "sentence_transformers.base.modules.transformer.Transformer",
            "Pooling": "sentence_transformers.sentence_transformer.modules.pooling.Pooling",
            "Normalize": "sentence_transformers.base.modules.normalize.Normalize"}


def _write(path: Path, data) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


def _hidden_size(directory: Path) -> int | None:
    """``hidden_size`` from ``config.json`` (``d_model`` / ``n_embd`` as fallbacks), or ``None``."""
    config_file = directory / "config.json"
    if not config_file.is_file():
        return None
    config = json.loads(config_file.read_text(encoding="utf-8"))
    return next((config[k] for k in ("hidden_size", "d_model", "n_embd") if k in config), None)


def write_st_files(directory, *, pooling: str = "mean", normalize: bool = True, max_seq_length: int | None = None,
                   prompts: dict[str, str] | None = None, default_prompt_name: str | None = None,
                   include_prompt: bool = True, embedding_dimension: int | None = None) -> Path:
    """Write modules.json, 1_Pooling/config.json, [2_Normalize/], sentence_bert_config.json and
    config_sentence_transformers.json into ``directory`` (after the model's ``config.json``); return it."""
    directory = Path(directory)
    if pooling not in POOLING_KEYS:
        raise ValueError(f"pooling={pooling!r}: expected one of {', '.join(POOLING_KEYS)}")
    prompts = dict(prompts or {})
    if default_prompt_name is not None and default_prompt_name not in prompts:
        raise ValueError(f"default_prompt_name={default_prompt_name!r} is not among the prompts {sorted(prompts)}")
    modules = [{"idx": 0, "name": "0", "path": "", "type": _MODULES["Transformer"]},
               {"idx": 1, "name": "1", "path": "1_Pooling", "type": _MODULES["Pooling"]}]
    if normalize:
        modules.append({"idx": 2, "name": "2", "path": "2_Normalize", "type": _MODULES["Normalize"]})
        _write(directory / "2_Normalize" / "config.json", {})
    _write(directory / "modules.json", modules)
    dimension = embedding_dimension or _hidden_size(directory)
    pooling_config = {"word_embedding_dimension": dimension}
    pooling_config.update({key: mode == pooling for mode, key in POOLING_KEYS.items()})
    pooling_config["include_prompt"] = include_prompt
    _write(directory / "1_Pooling" / "config.json", pooling_config)
    bert_config = {"do_lower_case": False}
    if max_seq_length is not None:
        bert_config["max_seq_length"] = max_seq_length
    _write(directory / "sentence_bert_config.json", bert_config)
    _write(directory / "config_sentence_transformers.json",
           {"model_type": "SentenceTransformer", "prompts": prompts, "default_prompt_name": default_prompt_name,
            "similarity_fn_name": "cosine"})
    return directory
