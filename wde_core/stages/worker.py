"""The worker: builds the model on its device, loads the weights, runs forward and the pooler."""

from __future__ import annotations

from typing import Callable

import torch

from wde_core.plugins.entries import import_target
from wde_core.stages.dense import load_dense_modules
from wde_core.stages.model_input import ModelInput, move_to
from wde_core.stages.pooling import Pooler
from wde_core.stages.weights import checkpoint_files, iter_checkpoint, load_weights


class ModelWorker:
    """Owns one model replica on one device; ``execute`` returns the pooler's dict of tensors on the CPU."""

    def __init__(self, pipeline, attention_backend) -> None:
        self.pipeline = pipeline
        self.attention = attention_backend
        self.device = pipeline.device
        self.model: torch.nn.Module | None = None
        self.pooler: Pooler | None = None

    def load_model(self) -> None:
        """Build the model class without allocating random weights, load the checkpoint, then call
        the model's optional ``after_load_weights()``, every submodule's ``prepack(cpu_policy)`` and the quantizer."""
        p = self.pipeline
        model_cls = import_target(p.link.model)
        checkpoint_files(p.model.path)  # no weights: say so before allocating the model
        with torch.device("meta"):
            model = model_cls(p.model.config, self.attention, p.settings)
        model = self.materialize(model)
        extra = getattr(model, "extra_checkpoint_files", {})
        load_weights(model, iter_checkpoint(p.model.path, extra), source=str(p.model.path))
        if hasattr(model, "after_load_weights"):
            model.after_load_weights()  # e.g. compute buffers, which meta construction left empty
        for module in model.modules():
            if callable(getattr(module, "prepack", None)):
                module.prepack(p.cpu)  # e.g. Linear: oneDNN-blocked weights on CPU, as the CPU policy says
        if p.quantize:  # the wde_select_quantization hook's function (quantization="int8")
            import_target(p.quantize)(model)
        self.model = model.eval().requires_grad_(False)
        self.pooler = Pooler(p.settings, self.model, load_dense_modules(p.model.st.dense, self.device))

    def materialize(self, model: torch.nn.Module) -> torch.nn.Module:
        """The meta-built model on the worker's device and dtype, uninitialized; a subclass may leave weights on the
        meta device (a pipeline stage: other stages' layers), which the loader then neither fills nor asks for."""
        return model.to_empty(device=self.device).to(self.pipeline.dtype)

    def execute(self, model_input: ModelInput) -> dict[str, torch.Tensor]:
        """Run one batch: forward, then pooling/head/activation; the results on the CPU."""
        return self.launch(model_input)()

    @torch.inference_mode()
    def launch(self, model_input: ModelInput) -> Callable[[], dict[str, torch.Tensor]]:
        """Start one batch and return the function that waits for its results on the CPU. On CUDA the kernels and
        the copy back (into pinned memory) are queued, and the host is free until that function is called."""
        model_input = move_to(model_input, self.device, pin=self.device.type == "cuda")
        output = self.pooler(self.model(model_input), model_input)
        if self.device.type != "cuda":
            return lambda: move_to(output, "cpu", non_blocking=False)
        host = move_to(output, "cpu", non_blocking=True)
        done = torch.cuda.Event()
        done.record()
        # copied out of the pinned buffers once complete: results the caller keeps must not hold page-locked memory
        return lambda: done.synchronize() or {k: v.clone() if torch.is_tensor(v) else v for k, v in host.items()}


def worker_factory(pipeline, attention_backend=None) -> Callable[[], ModelWorker]:
    """A function building one worker of the pipeline's worker component (attention backend built if not given)."""
    if attention_backend is None:
        attention_backend = pipeline.components["attention_backend"].load()(pipeline)
    worker_cls = pipeline.components["worker"].load()
    return lambda: worker_cls(pipeline, attention_backend)
