"""Engine arguments: the base set every workflow accepts; workflows may register subclasses."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping

DTYPES = ("auto", "float32", "float16", "bfloat16")
POOLINGS = ("cls", "mean", "last", "max")  # the pooling names: engine argument, 1_Pooling files, poolers
LONG_INPUTS = ("truncate", "error", "chunk")
QUANTIZATIONS = ("int8",)  # provided by a plugin's wde_select_quantization hook (wde-cpu-kernels: int8 on CPU)


@dataclass
class EngineArgs:
    """Arguments accepted by every workflow; ``None`` means "decide from the model or device".

    The token budget defaults to 4,096 on CPU and 16,384 on CUDA (at least ``max_model_len``); ``long_inputs``
    is what a call with ``truncate=None`` does with an over-long input: ``truncate``, ``error`` or ``chunk``;
    ``quantization="int8"`` quantizes the linear layers as the plugin answering ``wde_select_quantization`` does."""

    model: str | None = None
    revision: str | None = None
    task: str | None = None
    device: str = "auto"
    dtype: str = "auto"
    attention_backend: str | None = None
    executor: str | None = None
    max_model_len: int | None = None
    max_num_batched_tokens: int | None = None
    max_num_seqs: int = 256
    pooling: str | None = None
    normalize: bool | None = None
    num_threads: int | None = None
    num_replicas: int | None = None
    threads_per_replica: int | None = None
    tensor_parallel_size: int | None = None
    pipeline_parallel_size: int | None = None
    long_inputs: str = "truncate"
    variant: str | None = None  # an architecture link's variant, chosen whatever its matcher says
    quantization: str | None = None

    def __post_init__(self) -> None:
        for name, allowed in (("dtype", DTYPES), ("long_inputs", LONG_INPUTS), ("pooling", POOLINGS),
                              ("quantization", QUANTIZATIONS)):
            value = getattr(self, name)
            if value not in allowed and not (name in ("pooling", "quantization") and value is None):
                raise ValueError(f"engine argument {name}={value!r}: expected one of {', '.join(allowed)}")
        for name in ("max_num_batched_tokens", "max_num_seqs", "max_model_len", "num_threads", "num_replicas",
                     "threads_per_replica", "tensor_parallel_size", "pipeline_parallel_size"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ValueError(f"engine argument {name}={value!r}: expected a positive integer")

    @classmethod
    def from_kwargs(cls, kwargs: Mapping[str, Any], *, workflow: str = "") -> "EngineArgs":
        """Build from keyword arguments, refusing unknown names with the accepted ones listed."""
        accepted = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(kwargs) - accepted)
        if unknown:
            where = f" by workflow {workflow!r}" if workflow else ""
            raise TypeError(f"unknown engine argument(s) {', '.join(unknown)}; accepted{where}: "
                            f"{', '.join(sorted(accepted))}")
        return cls(**kwargs)


def child_engine_args(pipeline, index: int, threads: int) -> dict:
    """Engine arguments of worker process ``index`` (sync, its own threads and CUDA device, the resolved dtype):
    what the data-parallel and tensor-parallel executors give the engines in their processes."""
    args = {k: v for k, v in dataclasses.asdict(pipeline.args).items() if k != "model"}
    device = f"cuda:{index}" if pipeline.device.type == "cuda" else str(pipeline.device)
    dtype = str(pipeline.dtype).replace("torch.", "")
    return {**args, "executor": "sync", "num_threads": threads, "dtype": dtype, "device": device}
