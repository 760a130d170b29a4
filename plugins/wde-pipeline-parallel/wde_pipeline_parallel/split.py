"""Where a model is cut, decided on the meta device without weights. The model class declares its cut points:
``pipeline_layers``, the dotted name of its ``nn.ModuleList`` of layers (each called with the hidden states
``[T, H]`` first, returning the next ones), and ``pipeline_inputs``, the modules its forward runs before them.
Stage ``s`` of ``N`` holds a contiguous share of the layers; the first also the inputs, the last every other
weight (final norm, heads); buffers outside the layers and inputs (RoPE tables) are on every stage."""

from __future__ import annotations

import importlib
from dataclasses import dataclass

import torch

_MIB = 1 / 2 ** 20


class PipelineParallelError(ValueError):
    """The model cannot be cut as asked (no cut points declared, fewer layers than stages, too few devices)."""


def model_class(pipeline):
    """The pipeline's model class (the link's ``module:Class`` target)."""
    module, _, name = pipeline.link.model.partition(":")
    return getattr(importlib.import_module(module), name)


def declaring_class(cls) -> type | None:
    """The class whose ``pipeline_layers`` describes ``cls``'s forward: the declaration counts when it is made on
    the class defining ``forward`` or on a subclass of it (a subclass that changes ``forward`` must declare again)."""
    forward = next(c for c in cls.__mro__ if "forward" in vars(c))
    declared = next((c for c in cls.__mro__ if "pipeline_layers" in vars(c)), None)
    return declared if declared is not None and issubclass(declared, forward) else None


def check_support(pipeline) -> None:
    """Refuse, by name, a model class whose forward has no declared cut points."""
    if declaring_class(model_class(pipeline)) is None:
        raise PipelineParallelError(
            f"model class {pipeline.link.model} (architecture {pipeline.link.architecture}, from "
            f"{pipeline.link.provider}) declares no pipeline cut points for its forward (pipeline_layers and "
            "pipeline_inputs); use executor sync, pipelined, data_parallel or tensor_parallel")


@dataclass(frozen=True)
class StageSplit:
    """``stages`` stages over the ``num_layers`` layers of ``layers``; ``inputs`` on the first stage; ``tied``: input
    modules the last stage also reads while loading (a head cut from tied embeddings), dropped afterwards."""

    layers: str
    num_layers: int
    stages: int
    inputs: tuple[str, ...]
    tied: tuple[str, ...] = ()

    @classmethod
    def of(cls, model: torch.nn.Module, stages: int) -> "StageSplit":
        """Read the model's declaration and check that ``stages`` stages can each hold at least one layer."""
        name = type(model).__name__
        layers = model.get_submodule(model.pipeline_layers)
        if not isinstance(layers, torch.nn.ModuleList):
            raise PipelineParallelError(f"{name}.pipeline_layers={model.pipeline_layers!r} is not an nn.ModuleList")
        if len(layers) < stages:
            raise PipelineParallelError(f"{name} has {len(layers)} layer(s) in {model.pipeline_layers!r}: it cannot "
                                        f"be cut into pipeline_parallel_size={stages} stages")
        inputs, tied = tuple(model.pipeline_inputs), tuple(getattr(model, "pipeline_tied", ()))
        for module in (*inputs, *tied):
            model.get_submodule(module)  # AttributeError naming a declared module that does not exist
        return cls(model.pipeline_layers, len(layers), stages, inputs, tied)

    def layer_range(self, stage: int) -> range:
        """The layer indices of ``stage``: an even share, the first stages taking one more when it does not divide."""
        share, extra = divmod(self.num_layers, self.stages)
        start = stage * share + min(stage, extra)
        return range(start, start + share + (stage < extra))

    def stage_of_layer(self, index: int) -> int:
        """The stage that runs layer ``index``."""
        return next(s for s in range(self.stages) if index in self.layer_range(s))

    def holders(self, name: str, *, buffer: bool = False) -> range:
        """The stages holding the parameter (or buffer) ``name``."""
        if name.startswith(self.layers + "."):
            stage = self.stage_of_layer(int(name[len(self.layers) + 1:].split(".", 1)[0]))
            return range(stage, stage + 1)
        if any(name.startswith(module + ".") for module in self.inputs):
            return range(0, 1)
        return range(self.stages) if buffer else range(self.stages - 1, self.stages)

    def borrowed(self, stage: int) -> tuple[str, ...]:
        """Input modules ``stage`` reads while loading but does not keep: the tied ones, on a last stage not first."""
        return self.tied if stage == self.stages - 1 and stage > 0 else ()

    def keeps(self, name: str, stage: int, *, buffer: bool = False) -> bool:
        """Whether ``stage`` materializes tensor ``name`` (its own, or borrowed for loading)."""
        borrowed = any(name.startswith(module + ".") for module in self.borrowed(stage))
        return stage in self.holders(name, buffer=buffer) or borrowed

    def stage_bytes(self, model: torch.nn.Module, width: int) -> list[int]:
        """Parameter bytes each stage holds once loaded (``width`` bytes per element)."""
        held = [0] * self.stages
        for name, param in model.named_parameters():
            for stage in self.holders(name):
                held[stage] += param.numel() * width
        return held

    def describe(self, model: torch.nn.Module, stage: int) -> str:
        """What ``stage`` holds, for ``wde inspect``: its inputs, its layers, the other weights on the last."""
        span = self.layer_range(stage)
        parts = [*self.inputs] if stage == 0 else []
        parts.append(f"{self.layers}.{span[0]}-{span[-1]}" if len(span) > 1 else f"{self.layers}.{span[0]}")
        if stage == self.stages - 1:
            outside = [name.rsplit(".", 1)[0] if "." in name else name for name, _ in model.named_parameters()
                       if self.holders(name) == range(stage, stage + 1) and not name.startswith(self.layers + ".")]
            parts.extend(dict.fromkeys(outside))
        return ", ".join(parts)

    def reasons(self, model: torch.nn.Module, width: int, backend: str, tp_size: int = 1) -> dict[str, str]:
        """The split as ``wde inspect`` lines (pipeline reasons): one overall, one per stage with its bytes."""
        held, whole = self.stage_bytes(model, width), sum(p.numel() for p in model.parameters()) * width
        per_process = "one process each" if tp_size == 1 else f"{tp_size} tensor-parallel ranks each"
        lines = {"pipeline_parallel": f"{self.stages} stages ({backend}), {per_process}; parameters per stage "
                                      f"{' | '.join(f'{b * _MIB:.2f}' for b in held)} MiB of {whole * _MIB:.2f} MiB "
                                      f"({max(held) / max(whole, 1):.2f}x at most)"}
        for stage, size in enumerate(held):
            lines[f"pp_stage_{stage}"] = f"{self.describe(model, stage)}; {size * _MIB:.2f} MiB"
        return lines
