"""The models one server serves: each an ``AsyncEngine`` with what the routes need to know about it."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from wde_core.plugin_api import AsyncEngine, Request
from wde_server.errors import ApiError
from wde_server.images import tiny_png

# the routes each task serves, beside the ones every model serves
TASK_ROUTES = {
    "embed": ("/v1/embeddings", "/v2/embed", "/embed", "/embed_all", "/similarity", "/score"),
    "rerank": ("/v1/rerank", "/v2/rerank", "/rerank", "/score"),
    "classify": ("/predict", "/classify"),
    "token_classify": ("/pooling", "/token_classification"),
}
COMMON_ROUTES = ("/tokenize", "/decode", "/info", "/v1/models")
# a late-interaction model (ColQwen2: output="multi_vector", no pooled vector): its token vectors, MaxSim rankings
MULTI_VECTOR_ROUTES = ("/v2/embed", "/embed_all", "/v1/rerank", "/v2/rerank", "/rerank")
LATE_OUTPUTS = ("colbert", "multi_vector")  # token-vector outputs: bge-m3's ColBERT, a late-interaction model's


class ServedModel:
    """One served model: its name, its ``AsyncEngine`` and the facts routes check requests against."""

    def __init__(self, name: str, engine: AsyncEngine) -> None:
        self.name = name
        self.engine = engine
        self.sync = engine.engine
        pipeline = engine.pipeline
        self.task = pipeline.task
        self.settings = pipeline.settings
        self.max_model_len = pipeline.settings.max_model_len
        self.hf_tokenizer = self.sync.tokenizer.tokenizer
        self.outputs = tuple(getattr(self.sync.output_processor, "outputs", ("dense",)))
        self.hidden_size = vector_size(pipeline.model, self.outputs)
        self.id2label = dict(getattr(pipeline.model.config, "id2label", None) or {})
        self.ranges: np.ndarray | None = None  # int8/uint8 calibration: per-dimension [min, max]
        self.reads_texts, self.reads_images = reads(self.sync, "warm up"), reads(self.sync, image_probe())
        self.reads_pairs = self.reads_images and reads(self.sync, {"text": "warm up", **image_probe()})
        self.late_output = next((name for name in LATE_OUTPUTS if name in self.outputs), None)
        self.cuts_tokens = keeps_whole(self.sync)  # else the engine's tokenizer cuts (the end) or refuses

    @property
    def routes(self) -> tuple[str, ...]:
        """The inference routes this model serves."""
        routes = TASK_ROUTES.get(self.task, ())
        if "sparse" in self.outputs:
            routes += ("/embed_sparse",)
        if "multi_vector" in self.outputs:
            routes = MULTI_VECTOR_ROUTES
        return routes + COMMON_ROUTES

    def rerank_call(self, query: Any, documents: list, **kwargs: Any):
        """The prepared ranking of ``documents`` for ``query`` (images already read by ``images.rerank_items``): the
        cross-encoder's ``rerank``, or for a late-interaction model ``multi_vector_rerank`` (MaxSim)."""
        if "multi_vector" not in self.outputs:
            return self.sync.prepare("rerank", query, documents, **kwargs)
        kwargs.pop("raw_scores", None)  # MaxSim scores have no activation to leave out
        return self.sync.prepare("multi_vector_rerank", query, documents, **kwargs)

    def check_route(self, route: str) -> None:
        """Refuse a route this model's task does not serve, naming the ones it does (400)."""
        if route not in self.routes:
            raise ApiError(400, f"model {self.name!r} is served for the {self.task!r} task, which {route} does "
                                f"not serve; its routes: {', '.join(self.routes)}", param="model")

    def alive(self) -> bool:
        """Whether this model can serve: its engine loop runs and its executor (if it can tell) is healthy."""
        healthy = getattr(self.sync.executor, "healthy", None)
        return self.engine.is_alive() and (healthy is None or healthy())

    async def calibrate(self, texts: Sequence[str]) -> None:
        """Per-dimension ranges for int8/uint8 output, from the embeddings of ``texts``."""
        if self.task != "embed" or "dense" not in self.outputs:
            return
        vectors = np.asarray(await self.engine.encode(list(texts), normalize=None), dtype=np.float32)
        self.ranges = np.vstack((vectors.min(axis=0), vectors.max(axis=0)))

    def info(self) -> dict[str, Any]:
        """What ``/info`` and ``/v1/models`` say about this model."""
        describe = self.engine.pipeline.describe()
        return {"model_id": self.name, "path": describe["path"], "task": self.task,
                "architecture": describe["architecture"], "model_dtype": describe["dtype"],
                "pooling": describe["pooling"], "max_input_length": self.max_model_len,
                "max_batch_tokens": self.engine.pipeline.args.max_num_batched_tokens,
                "max_batch_requests": self.engine.pipeline.args.max_num_seqs,
                "outputs": list(self.outputs), "vector_size": self.hidden_size,
                "prompts": sorted(self.settings.prompts),
                "labels": [self.id2label[k] for k in sorted(self.id2label)] if self.task != "embed" else []}


def vector_size(directory: Any, outputs: Sequence[str]) -> int | None:
    """The width of the model's vectors: a late-interaction model's token vectors (``embedding_dim``), else the pooled
    embedding's, read from the text config when the config has none at the top (Qwen2-VL, CLIP, SigLIP)."""
    config = directory.config
    if "multi_vector" in outputs:
        return getattr(config, "embedding_dim", None)
    text = getattr(config, "text_config", None)
    return (directory.embedding_size or getattr(text, "projection_size", None)
            or getattr(config, "projection_dim", None) or getattr(text, "hidden_size", None))


def image_probe() -> dict | None:
    """A tiny PNG as an image input; ``None`` without Pillow (then no model reads images)."""
    try:
        return {"image": tiny_png()}
    except ImportError:
        return None


def reads(engine: Any, item: Any) -> bool:
    """Whether an embedder's input processor takes ``item`` (a text, or an image input); a reranker's, as a pair's
    document."""
    task = engine.pipeline.task
    if item is None or isinstance(item, str) or task not in ("embed", "rerank"):
        return isinstance(item, str)
    try:
        engine.input_processor.process([item] if task == "embed" else [("warm up", item)])
    except Exception:  # noqa: BLE001 - whatever refuses the probe does not read it
        return False
    return True


def keeps_whole(engine: Any) -> bool:
    """Whether the engine's tokenizer leaves an over-long text whole (``truncate="chunk"``), for the server
    to cut it at either end or refuse it; image-text tokenizers cut the end themselves."""
    if engine.pipeline.task != "embed":
        return True
    try:
        engine.tokenizer.tokenize([Request(0, "probe")], truncate="chunk")
    except Exception:  # noqa: BLE001
        return False
    return True


class ModelSet:
    """The served models by name; the first is the default for routes that take no ``model`` field."""

    def __init__(self, models: Sequence[ServedModel]) -> None:
        if not models:
            raise ValueError("serve at least one model")
        self.by_name: dict[str, ServedModel] = {}
        for model in models:
            if model.name in self.by_name:
                raise ValueError(f"served model name {model.name!r} is given twice; pass --served-model-name")
            self.by_name[model.name] = model
        self.default = models[0]

    def get(self, name: str | None) -> ServedModel:
        """The model named ``name`` (the default when ``None``); 404 listing the served names."""
        if name is None:
            return self.default
        model = self.by_name.get(name)
        if model is None:
            raise ApiError(404, f"model {name!r} is not served here; served models: {', '.join(self.by_name)}",
                           param="model", code="model_not_found")
        return model

    def __iter__(self):
        return iter(self.by_name.values())

    def dead(self) -> list[str]:
        """Names of the models whose engine loop died."""
        return [m.name for m in self if not m.alive()]

    async def close(self) -> None:
        """Finish queued work and close every engine."""
        await asyncio.gather(*(m.engine.close() for m in self))


def load_model(model: str | None, name: str | None, engine_args: dict[str, Any]) -> ServedModel:
    """Build the engine for ``model`` (the default model when ``None``) and serve it as ``name``."""
    engine = AsyncEngine(model, **engine_args)
    return ServedModel(name or served_name(model, engine), engine)


def served_name(model: str | None, engine: AsyncEngine) -> str:
    """The name clients use: the model as given (a hub id or a path), or the default model's name."""
    return model if model is not None else engine.pipeline.model.name


def read_calibration(path: str | Path) -> list[str]:
    """Calibration texts: one per line of a ``.txt`` file, or the ``text`` field of each ``.jsonl`` line."""
    path = Path(path)
    lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    texts = [json.loads(line)["text"] for line in lines] if path.suffix == ".jsonl" else lines
    if len(texts) < 2:
        raise ValueError(f"{path}: calibration needs at least 2 texts (hundreds are better), got {len(texts)}")
    return texts
