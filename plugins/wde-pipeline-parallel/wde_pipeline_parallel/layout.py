"""How many processes, where, and the checks made at assembly: ``pipeline_parallel_size`` stages, each of
``tensor_parallel_size`` ranks (default 1), one process per rank; global rank ``stage * tp + tp_rank``."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from wde_pipeline_parallel.split import PipelineParallelError, StageSplit, check_support, model_class


@dataclass(frozen=True)
class Layout:
    """``stages`` stages of ``tp_size`` ranks each, joined with ``backend``."""

    stages: int
    tp_size: int
    backend: str

    @property
    def processes(self) -> int:
        """The number of stage processes."""
        return self.stages * self.tp_size

    def name(self, rank: int) -> str:
        """How errors name process ``rank``: ``stage 1``, or ``stage 1 rank 0`` with tensor parallelism."""
        stage, tp_rank = divmod(rank, self.tp_size)
        return f"stage {stage}" if self.tp_size == 1 else f"stage {stage} rank {tp_rank}"

    @classmethod
    def of(cls, pipeline) -> "Layout":
        """From the engine arguments: 2 stages by default on CPU, every CUDA device on CUDA (one per process)."""
        tp = pipeline.args.tensor_parallel_size or 1
        stages = pipeline.args.pipeline_parallel_size
        if pipeline.device.type != "cuda":
            return cls(stages or 2, tp, "gloo")
        devices = torch.cuda.device_count()
        stages = stages or max(devices // tp, 1)
        if stages * tp > devices:
            raise PipelineParallelError(f"pipeline_parallel_size={stages} x tensor_parallel_size={tp} needs "
                                        f"{stages * tp} CUDA devices (one per stage process); {devices} visible")
        return cls(stages, tp, "nccl")


def build_meta(pipeline, tp_size: int) -> torch.nn.Module:
    """The whole model built on the meta device (as tensor-parallel rank 0 of ``tp_size``): no memory, no weights."""
    from wde_core.plugin_api import TensorParallel, set_tensor_parallel

    attention = pipeline.components["attention_backend"].load()(pipeline)
    previous = set_tensor_parallel(TensorParallel(0, tp_size))
    try:
        with torch.device("meta"):
            return model_class(pipeline)(pipeline.model.config, attention, pipeline.settings)
    except ValueError as exc:
        raise PipelineParallelError(f"model {pipeline.model.name!r} cannot be split across tensor_parallel_size="
                                    f"{tp_size} ranks per stage: {exc}") from None
    finally:
        set_tensor_parallel(previous)


def check_layout(pipeline) -> Layout:
    """Refuse what cannot be run (no cut points, too few layers, quantization, a model without tensor-parallel
    support under tensor_parallel_size > 1), and add the split to the pipeline's reasons (``wde inspect``)."""
    layout = Layout.of(pipeline)
    check_support(pipeline)
    if pipeline.quantize:
        raise PipelineParallelError(f"quantization={pipeline.args.quantization!r} is not supported with executor "
                                    "pipeline_parallel (the quantizer expects every layer loaded)")
    if layout.tp_size > 1 and not vars(model_class(pipeline)).get("supports_tensor_parallel", False):
        raise PipelineParallelError(f"model class {pipeline.link.model} does not support tensor parallelism "
                                    "(supports_tensor_parallel = True): leave tensor_parallel_size out")
    model = build_meta(pipeline, layout.tp_size)
    split = StageSplit.of(model, layout.stages)
    pipeline.reasons.update(split.reasons(model, pipeline.dtype.itemsize, layout.backend, layout.tp_size))
    return layout
