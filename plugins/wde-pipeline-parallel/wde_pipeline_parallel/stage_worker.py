"""A pipeline stage's worker: the pipeline's own worker class, building only this stage's share of the model.

Layers of other stages pass their input through (:func:`pass_through`); weights of other stages stay on the meta
device, where the core's loader neither fills nor asks for them. The model's own ``forward`` runs unchanged: on a
stage after the first, the inputs (embeddings) run on the meta device (shapes only) and the first local layer takes
the received hidden states instead; on a stage before the last, the last local layer's output ends the forward."""

from __future__ import annotations

import torch
from torch import nn

from wde_core.plugin_api import move_to
from wde_pipeline_parallel.split import StageSplit


def pass_through(hidden, *args, **kwargs):
    """The forward of a layer another stage runs: the hidden states it is given, unchanged."""
    return hidden


class StageDone(Exception):
    """Raised by the last local layer of a stage before the last: carries the hidden states to send on."""

    def __init__(self, hidden: torch.Tensor) -> None:
        super().__init__("pipeline stage done")
        self.hidden = hidden


def _meta(value):
    return value.to("meta") if isinstance(value, torch.Tensor) else value


def _run_on_meta(module, args, kwargs):
    """Forward pre-hook of a module another stage holds: its inputs go to the meta device, so only shapes flow."""
    return tuple(_meta(a) for a in args), {key: _meta(v) for key, v in kwargs.items()}


def _single_rank(module: nn.Module) -> None:
    """Make a meta-run module's tensor-parallel layers act as one rank (no collectives on meta tensors)."""
    from wde_core.plugin_api import TensorParallel

    for sub in module.modules():
        if hasattr(sub, "tp"):
            sub.tp = TensorParallel()


def materialize_stage(model: nn.Module, split: StageSplit, stage: int, device: torch.device) -> None:
    """Allocate (uninitialized, on ``device``) exactly the parameters and buffers ``stage`` keeps."""
    for module_name, module in model.named_modules():
        for kind in ("_parameters", "_buffers"):
            for attr, tensor in getattr(module, kind).items():
                name = f"{module_name}.{attr}" if module_name else attr
                if tensor is None or not split.keeps(name, stage, buffer=kind == "_buffers"):
                    continue
                empty = torch.empty_like(tensor, device=device)
                getattr(module, kind)[attr] = nn.Parameter(empty, requires_grad=False) if kind == "_parameters" \
                    else empty


class StageWorkerMixin:
    """Mixed into the pipeline's worker class: ``stage`` of ``stages``; ``run_stage`` replaces ``execute``."""

    stage: int = 0
    stages: int = 1
    split: StageSplit | None = None
    incoming: torch.Tensor | None = None
    link = None  # the stage process's Link to its neighbours (wde_pipeline_parallel.stage sets it)

    def materialize(self, model: nn.Module) -> nn.Module:
        """Cut the meta-built model to this stage, allocate what it keeps, and hook its first and last layers."""
        self.split = split = StageSplit.of(model, self.stages)
        layers = model.get_submodule(split.layers)
        local = split.layer_range(self.stage)
        for index in range(split.num_layers):
            if index not in local:
                layers[index].forward = pass_through  # its weights stay on meta, still declared to the loader
        materialize_stage(model, split, self.stage, self.device)
        model = model.to(self.pipeline.dtype)
        if self.stage > 0:
            for name in split.inputs:
                _single_rank(model.get_submodule(name))
                model.get_submodule(name).register_forward_pre_hook(_run_on_meta, with_kwargs=True)
            layers[local[0]].register_forward_pre_hook(self._take_incoming)
        if self.stage < self.stages - 1:
            layers[local[-1]].register_forward_hook(_end_stage)
        return model

    def load_model(self) -> None:
        """Load this stage's weights, then drop the modules it only read while loading (tied embeddings)."""
        super().load_model()
        for name in self.split.borrowed(self.stage):
            self.model.get_submodule(name).to("meta")

    def _take_incoming(self, layer, args):
        return (self.incoming, *args[1:])

    @torch.inference_mode()
    def run_stage(self, model_input, incoming: torch.Tensor | None):
        """This stage's part of one batch: the hidden states ``[T, H]`` to send on, or (last stage) the pooled
        dict of tensors on the CPU."""
        model_input = model_input.to(self.device)
        self.incoming = incoming
        try:
            output = self.model(model_input)
        except StageDone as done:
            return done.hidden
        finally:
            self.incoming = None
        return move_to(self.pooler(output, model_input), "cpu", non_blocking=False)


def _end_stage(layer, args, output):
    raise StageDone(output)


def stage_worker(worker_cls: type, pipeline, attention, stage: int, stages: int):
    """A worker of ``worker_cls`` (the pipeline's worker component) building only ``stage`` of ``stages``."""
    cls = type(f"Stage{worker_cls.__name__}", (StageWorkerMixin, worker_cls), {})
    worker = cls(pipeline, attention)
    worker.stage, worker.stages = stage, stages
    return worker
