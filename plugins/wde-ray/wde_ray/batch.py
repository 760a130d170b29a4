"""Batch inference on Ray Data: ``embed``, ``rerank`` and ``score`` return a lazy ``ray.data.Dataset`` whose
``map_batches`` runs one ``Engine`` per actor of an actor pool."""

from __future__ import annotations

from typing import Any, Sequence

from wde_ray.actors import EmbedActor, ScoreActor
from wde_ray.rows import check_on_error

DEFAULT_BATCH_SIZE = 256


def actor_pool(workers: int | tuple[int, int]) -> Any:
    """``ActorPoolStrategy`` of ``workers`` actors, or autoscaling between ``(min_size, max_size)``."""
    from ray.data import ActorPoolStrategy

    if isinstance(workers, int):
        return ActorPoolStrategy(size=workers)
    low, high = workers
    return ActorPoolStrategy(min_size=low, max_size=high)


def actor_engine_args(engine_args: dict[str, Any], num_cpus: float, num_gpus: float) -> dict[str, Any]:
    """Engine arguments of each actor: ``num_threads`` defaults to the actor's CPUs, ``device`` to what it holds."""
    args = dict(engine_args)
    args.setdefault("num_threads", max(1, int(num_cpus)))
    args.setdefault("device", "cuda" if num_gpus else "cpu")
    return args


def run_pool(ds: Any, actor: type, constructor: dict[str, Any], *, batch_size: int,
             workers: int | tuple[int, int], num_cpus: float, num_gpus: float) -> Any:
    """``ds`` split into blocks of ``batch_size`` rows, mapped by ``actor`` on the pool, in input order."""
    out = ds.repartition(target_num_rows_per_block=batch_size).map_batches(
        actor, fn_constructor_kwargs=constructor, batch_format="pyarrow", batch_size=batch_size,
        compute=actor_pool(workers), num_cpus=num_cpus, num_gpus=num_gpus or None)
    out.context.execution_options.preserve_order = True
    out.context.raise_original_map_exception = True  # a bad row raises a RowError, not Ray's UserCodeException
    return out


def embed(ds: Any, model: str | None = None, *, column: str = "text", output_column: str = "embedding",
          image_column: str | None = None, image_root: str | None = None,
          id_column: str | None = "id", on_error: str = "raise", allow_empty: bool = False,
          batch_size: int = DEFAULT_BATCH_SIZE, workers: int | tuple[int, int] = 1, num_cpus: float = 1,
          num_gpus: float = 0, normalize: bool | None = None, dimensions: int | None = None,
          prompt: str | None = None, prompt_name: str | None = None, truncate: bool | str | None = None,
          output: str | Sequence[str] = "dense", **engine_args: Any) -> Any:
    """``ds`` with ``output_column`` added: ``Engine(model, **engine_args).encode`` of ``column``, row for row.

    ``image_column`` embeds that column's images instead of the texts (an image model, e.g. CLIP): binary
    bytes, file paths (a relative one joined to ``image_root``) or ``data:image/...;base64,`` URLs. ``output``
    as a tuple (bge-m3: ``("dense", "sparse")``) adds one column per output, named ``{output_column}_{name}``.
    A bad row raises :class:`~wde_ray.RowError` naming its id and column, or, with ``on_error="null"``, gets a
    null output and a message in an ``error`` column."""
    check_on_error(on_error)
    names = (output,) if isinstance(output, str) else tuple(output)
    columns = {output: output_column} if isinstance(output, str) else {n: f"{output_column}_{n}" for n in names}
    call_args = dict(normalize=normalize, dimensions=dimensions, prompt=prompt, prompt_name=prompt_name,
                     truncate=truncate, output=output)
    constructor = dict(model=model, engine_args=actor_engine_args(engine_args, num_cpus, num_gpus),
                       columns=(image_column or column,), id_column=id_column, on_error=on_error,
                       allow_empty=allow_empty, call_args=call_args, output_columns=columns,
                       images=image_column is not None, image_root=image_root)
    return run_pool(ds, EmbedActor, constructor, batch_size=batch_size, workers=workers, num_cpus=num_cpus,
                    num_gpus=num_gpus)


def score(ds: Any, model: str | None = None, *, columns: tuple[str, str] = ("text_1", "text_2"),
          output_column: str = "score", id_column: str | None = "id", on_error: str = "raise",
          allow_empty: bool = False, batch_size: int = DEFAULT_BATCH_SIZE, workers: int | tuple[int, int] = 1,
          num_cpus: float = 1, num_gpus: float = 0, raw_scores: bool = False, truncate: bool | None = None,
          **engine_args: Any) -> Any:
    """``ds`` with ``output_column`` added: a cross-encoder's ``Engine.score`` of each row's pair of ``columns``."""
    check_on_error(on_error)
    constructor = dict(model=model, engine_args=actor_engine_args(engine_args, num_cpus, num_gpus),
                       columns=tuple(columns), id_column=id_column, on_error=on_error, allow_empty=allow_empty,
                       call_args=dict(raw_scores=raw_scores, truncate=truncate), output_column=output_column)
    return run_pool(ds, ScoreActor, constructor, batch_size=batch_size, workers=workers, num_cpus=num_cpus,
                    num_gpus=num_gpus)


def rerank(ds: Any, model: str | None = None, *, query_column: str = "query", document_column: str = "document",
           output_column: str = "score", **kwargs: Any) -> Any:
    """``ds`` with ``output_column`` added: the relevance of each row's document to its query, the score
    ``Engine.rerank(query, documents)`` gives that document (documents are cut, never queries). Sorting per
    query is a ``groupby`` away; rows stay in input order."""
    return score(ds, model, columns=(query_column, document_column), output_column=output_column, **kwargs)
