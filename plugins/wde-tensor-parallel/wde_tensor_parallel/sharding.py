"""What tensor parallelism does to a model, decided at assembly without loading weights: the model class must
declare ``supports_tensor_parallel = True`` itself, the model is built on the meta device as rank 0 of N (so
heads that N does not divide are refused by the model's own layers), and each weight's split is described."""

from __future__ import annotations

import importlib
import re
from collections import defaultdict
from dataclasses import dataclass, field

import torch

from wde_core.plugin_api import (ColumnParallelLinear, RowParallelLinear, TensorParallel, VocabParallelEmbedding,
                                 set_tensor_parallel)

_LAYER_INDEX = re.compile(r"\.\d+\.")
_NOTES = {"column": "output rows split per fused part (q/k/v by heads, gate/up)",
          "row": "input columns split, one all-reduce each, bias added once",
          "vocab": "vocabulary rows split, one all-reduce", "replicated": "whole on every rank"}
_MIB = 1 / 2 ** 20


class TensorParallelError(ValueError):
    """The model cannot be split as asked (no tensor-parallel support, heads not divisible, too few devices)."""


@dataclass
class ShardingPlan:
    """Which weights split how across ``size`` ranks, and the parameter bytes of one rank and of the whole model."""

    size: int
    splits: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    bytes: dict[str, list[int]] = field(default_factory=lambda: defaultdict(lambda: [0, 0]))  # kind -> rank, whole

    @property
    def rank_bytes(self) -> int:
        """Parameter bytes of one rank."""
        return sum(rank for rank, _ in self.bytes.values())

    @property
    def whole_bytes(self) -> int:
        """Parameter bytes of the whole model."""
        return sum(whole for _, whole in self.bytes.values())

    def reasons(self, backend: str) -> dict[str, str]:
        """The plan as ``wde inspect`` lines (pipeline reasons): one per kind of split, with its bytes per rank."""
        lines = {"tensor_parallel": f"{self.size} ranks ({backend}), one process each; parameters per rank "
                                    f"{self.rank_bytes * _MIB:.2f} MiB of {self.whole_bytes * _MIB:.2f} MiB "
                                    f"({self.rank_bytes / max(self.whole_bytes, 1):.2f}x)"}
        for kind in _NOTES:
            if kind in self.splits:
                rank, whole = self.bytes[kind]
                names = self.splits[kind]
                shown = ", ".join(names[:10]) + (f" and {len(names) - 10} more" if len(names) > 10 else "")
                lines[f"tp_{kind}"] = (f"{_NOTES[kind]}; {rank * _MIB:.2f} of {whole * _MIB:.2f} MiB per rank: "
                                       f"{shown}")
        return lines


def model_class(pipeline):
    """The pipeline's model class (the link's ``module:Class`` target)."""
    module, _, name = pipeline.link.model.partition(":")
    return getattr(importlib.import_module(module), name)


def check_support(pipeline) -> None:
    """Refuse, by name, a model class that does not itself declare ``supports_tensor_parallel = True``."""
    cls = model_class(pipeline)
    if not vars(cls).get("supports_tensor_parallel", False):
        raise TensorParallelError(
            f"model class {pipeline.link.model} (architecture {pipeline.link.architecture}, from "
            f"{pipeline.link.provider}) does not support tensor parallelism: it does not declare "
            "supports_tensor_parallel = True; use executor sync, pipelined or data_parallel")


def build_meta(pipeline, context: TensorParallel) -> torch.nn.Module:
    """The model built on the meta device as ``context``'s rank (no memory, no weights)."""
    attention = pipeline.components["attention_backend"].load()(pipeline)
    previous = set_tensor_parallel(context)
    try:
        with torch.device("meta"):
            return model_class(pipeline)(pipeline.model.config, attention, pipeline.settings)
    except ValueError as exc:
        raise TensorParallelError(f"model {pipeline.model.name!r} cannot be split across {context.size} ranks: "
                                  f"{exc}") from None
    finally:
        set_tensor_parallel(previous)


def sharding_plan(pipeline, size: int) -> ShardingPlan:
    """Build the model as rank 0 of ``size`` and as a whole; classify each weight's split."""
    check_support(pipeline)
    split = build_meta(pipeline, TensorParallel(0, size))
    whole = dict(build_meta(pipeline, TensorParallel()).named_parameters())
    width = pipeline.dtype.itemsize
    plan = ShardingPlan(size)
    for module_name, module in split.named_modules():
        for attr, param in module.named_parameters(recurse=False):
            name = f"{module_name}.{attr}" if module_name else attr
            kind = _kind(module, attr)
            plan.bytes[kind][0] += param.numel() * width
            plan.bytes[kind][1] += whole[name].numel() * width
            pattern = _LAYER_INDEX.sub(".*.", name)
            if pattern not in plan.splits[kind]:
                plan.splits[kind].append(pattern)
    return plan


def _kind(module: torch.nn.Module, attr: str) -> str:
    if isinstance(module, ColumnParallelLinear):
        return "column"
    if isinstance(module, RowParallelLinear) and attr == "weight":
        return "row"
    if isinstance(module, VocabParallelEmbedding):
        return "vocab"
    return "replicated"

