"""Reading checkpoints (safetensors, sharded or not, and ``pytorch_model.bin``) into a model.

The model's ``map_checkpoint_name(name)`` returns ``(parameter_name, rows)`` (``rows``: ``None``, or the
``slice`` of dimension 0 the tensor fills, as in a fused QKV) or ``None`` for a weight it skips. Missing,
unexpected and mis-shaped weights are errors that name them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator, Mapping

import torch

SAFETENSORS_INDEX = "model.safetensors.index.json"
BIN_INDEX = "pytorch_model.bin.index.json"


class WeightsError(ValueError):
    """The checkpoint does not fit the model, or cannot be read."""


def checkpoint_files(directory: Path) -> list[Path]:
    """Return the weight files of a model directory, preferring safetensors."""
    for index_name, single in ((SAFETENSORS_INDEX, "model.safetensors"), (BIN_INDEX, "pytorch_model.bin")):
        if (directory / index_name).is_file():
            weight_map = json.loads((directory / index_name).read_text())["weight_map"]
            return [directory / name for name in sorted(set(weight_map.values()))]
        if (directory / single).is_file():
            return [directory / single]
    raise WeightsError(f"{directory}: no weights found (model.safetensors, {SAFETENSORS_INDEX}, "
                       f"pytorch_model.bin or {BIN_INDEX})")


def iter_checkpoint(directory: Path, extra_files: Mapping[str, str] | None = None,
                    ) -> Iterator[tuple[str, torch.Tensor]]:
    """Yield ``(name, tensor)`` for every weight in the directory, one file at a time, then those of
    ``extra_files`` (``torch.save``d state dicts such as bge-m3's ``colbert_linear.pt``, name -> prefix)."""
    for path in checkpoint_files(directory):
        if not path.is_file():
            raise WeightsError(f"weights file {path} is listed in the index but missing")
        yield from (_iter_safetensors(path) if path.suffix == ".safetensors" else _iter_bin(path))
    for name, prefix in (extra_files or {}).items():
        if not (directory / name).is_file():
            raise WeightsError(f"{directory}: weights file {name} is missing")
        yield from ((prefix + key, tensor) for key, tensor in _iter_bin(directory / name))


def _iter_safetensors(path: Path) -> Iterator[tuple[str, torch.Tensor]]:
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), framework="pt") as f:
            for name in f.keys():
                yield name, f.get_tensor(name)
    except SafetensorError as exc:
        raise WeightsError(f"corrupted safetensors file {path}: {exc}") from None


def _iter_bin(path: Path) -> Iterator[tuple[str, torch.Tensor]]:
    try:
        state = torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - pickle, zip and unpickler errors alike
        raise WeightsError(f"unreadable weights file {path}: {exc}") from None
    yield from state.items()


def load_weights(model: torch.nn.Module, weights: Iterator[tuple[str, torch.Tensor]], *, source: str = "") -> None:
    """Copy ``weights`` into ``model``; raise :class:`WeightsError` naming any misfit."""
    declared = dict(model.named_parameters())
    params = {name: param for name, param in declared.items() if not param.is_meta}  # meta: not held here
    filled: dict[str, int] = {}
    unexpected: list[str] = []
    for name, tensor in weights:
        mapped = model.map_checkpoint_name(name)
        if mapped is None:
            continue
        param_name, rows = mapped
        param = params.get(param_name)
        if param is None:
            if param_name not in declared:
                unexpected.append(name)
            continue
        module, _, attr = param_name.rpartition(".")
        shard = getattr(model.get_submodule(module), "shard_checkpoint", None)
        if shard is not None:  # a tensor-parallel layer keeps its rank's slice (wde_core.modeling.parallel)
            tensor, rows = shard(attr, tensor, rows)
        target = param.data if rows is None else param.data[rows]
        if tuple(tensor.shape) != tuple(target.shape):
            raise WeightsError(f"weight {name!r} has shape {list(tensor.shape)} in the checkpoint, "
                               f"the model expects {list(target.shape)}")
        target.copy_(tensor)
        filled[param_name] = filled.get(param_name, 0) + target.shape[0]
    missing = [p for p, param in params.items() if filled.get(p, 0) < param.shape[0]]
    where = f" ({source})" if source else ""
    if unexpected:
        raise WeightsError(f"unexpected weights in the checkpoint{where}: {_names(unexpected)}")
    if missing:
        raise WeightsError(f"weights missing from the checkpoint{where}: {_names(missing)}")


def _names(names: list[str], limit: int = 8) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" (and {len(names) - limit} more)" if len(names) > limit else "")
