"""The callable classes ``map_batches`` runs on an actor pool: each actor builds one ``Engine`` and turns a
batch (a ``pyarrow.Table``) into the same table with the engine's output column(s) added."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from wde_ray.images import BadValue, image_item, warm_up_image
from wde_ray.rows import (ERROR_COLUMN, error_column, find_problems, output_column, raise_first, row_ids,
                          scatter, text_problem)


class EngineActor:
    """One ``Engine`` per actor; ``__call__`` runs the engine's ``method`` on a batch's rows."""

    method = "encode"

    def __init__(self, model: str | None, engine_args: dict[str, Any], columns: tuple[str, ...],
                 id_column: str | None, on_error: str, allow_empty: bool, call_args: dict[str, Any]) -> None:
        from wde_core.plugin_api import Engine

        self.engine = Engine(model, **engine_args)
        self.columns, self.id_column, self.on_error = columns, id_column, on_error
        self.allow_empty, self.call_args = allow_empty, call_args

    def inputs(self, batch: pa.Table) -> list[Any]:
        """The engine's inputs, one per row: the text, or a tuple of the row's texts for pairs."""
        missing = [c for c in self.columns if c not in batch.column_names]
        if missing:
            raise KeyError(f"no column {missing[0]!r} in the data (columns: {', '.join(batch.column_names)})")
        values = [batch.column(c).to_pylist() for c in self.columns]
        return values[0] if len(values) == 1 else list(zip(*values))

    def __call__(self, batch: pa.Table) -> pa.Table:
        inputs, n = self.inputs(batch), batch.num_rows
        problems = find_problems(inputs, self.columns, lambda _: None, self.check)
        try:
            keep, prepared = self.prepare_kept(inputs, problems)
        except (ValueError, TypeError):  # the engine refused a row: find which, one row at a time
            problems = find_problems(inputs, self.columns, self.prepare_one, self.check)
            keep, prepared = self.prepare_kept(inputs, problems)
        if self.on_error == "raise":
            raise_first(problems, row_ids(batch, self.id_column))
        result = prepared.collect(self.engine.run(prepared.requests)) if keep else None
        out = self.add_outputs(batch, result, keep)
        if self.on_error == "null":
            out = out.append_column(ERROR_COLUMN, error_column(problems, n))
        return out

    def prepare_kept(self, inputs: list[Any], problems: dict) -> tuple[list[int], Any]:
        """The rows without a problem, and the engine's prepared call of them (``None`` when there are none)."""
        keep = [i for i in range(len(inputs)) if i not in problems]
        return keep, self.engine.prepare(self.method, [inputs[i] for i in keep], **self.call_args) if keep else None

    def check(self, value: Any) -> str | None:
        """Why one column's value cannot go to the engine (``None``: it can)."""
        return text_problem(value, allow_empty=self.allow_empty)

    def prepare_one(self, row: list[Any]) -> Any:
        """The engine's validation of one row (raises ``ValueError``/``TypeError`` for a bad one)."""
        return self.engine.prepare(self.method, row, **self.call_args)

    def add_outputs(self, batch: pa.Table, result: Any, keep: list[int]) -> pa.Table:
        """``batch`` with the output column(s) appended."""
        raise NotImplementedError


class EmbedActor(EngineActor):
    """``Engine.encode`` on a text column, or with ``images=True`` on an image column (bytes, paths relative to
    ``image_root``, data URLs): one column per output (``dense`` vectors, ``sparse``, ``colbert``)."""

    def __init__(self, *args: Any, output_columns: dict[str, str], images: bool = False,
                 image_root: str | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.output_columns, self.images, self.image_root = output_columns, images, image_root
        warm = self.engine.encode([warm_up_image() if images else "warm up"], **self.call_args)  # and the width
        dense = warm.get("dense") if isinstance(warm, dict) else warm
        self.dim = dense.shape[1] if "dense" in output_columns else 0

    def inputs(self, batch: pa.Table) -> list[Any]:
        """The column's texts, or its images as the engine's image inputs (a :class:`BadValue` where none)."""
        values = super().inputs(batch)
        return [image_item(v, self.image_root) for v in values] if self.images else values

    def check(self, value: Any) -> str | None:
        """Why one value cannot go to the engine: a text's problem, or an image value's."""
        if self.images:
            return value.message if isinstance(value, BadValue) else None
        return super().check(value)

    def add_outputs(self, batch: pa.Table, result: Any, keep: list[int]) -> pa.Table:
        """One column per requested output, null for the rows that failed."""
        single = len(self.output_columns) == 1
        for name, column in self.output_columns.items():
            values = [] if result is None else (result if single else result[name])
            batch = batch.append_column(column, output_column(name, values, keep, batch.num_rows, self.dim))
        return batch


class ScoreActor(EngineActor):
    """``Engine.score`` on a pair of text columns (query, document): a float32 score column."""

    method = "score"

    def __init__(self, *args: Any, output_column: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.output_column = output_column

    def add_outputs(self, batch: pa.Table, result: Any, keep: list[int]) -> pa.Table:
        """The score column, null for the rows that failed."""
        scores = [] if result is None else [float(s) for s in result]
        return batch.append_column(self.output_column, pa.array(scatter(scores, keep, batch.num_rows), pa.float32()))
