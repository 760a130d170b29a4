"""Rows in, columns out: naming a bad row, checking texts before the engine sees them, and Arrow columns for
the engine's outputs (with nulls for the rows that failed)."""

from __future__ import annotations

import re
from typing import Any, Callable, Sequence

import numpy as np
import pyarrow as pa

ON_ERROR = ("raise", "null")
ERROR_COLUMN = "error"
_ENGINE_PREFIX = re.compile(r"^input \d+: (field '\w+':? )?")


class RowError(ValueError):
    """A bad input row: the message names its id and its column."""


def check_on_error(on_error: str) -> None:
    """``ValueError`` unless ``on_error`` is ``"raise"`` or ``"null"``."""
    if on_error not in ON_ERROR:
        raise ValueError(f"on_error={on_error!r}: expected one of {', '.join(map(repr, ON_ERROR))}")


def row_ids(batch: pa.Table, id_column: str | None) -> list[Any]:
    """The batch's row ids: the ``id_column`` values, or ``None`` for each row when there is no such column."""
    if id_column and id_column in batch.column_names:
        return batch.column(id_column).to_pylist()
    return [None] * batch.num_rows


def describe_row(row_id: Any, position: int, column: str) -> str:
    """``row id=7, column 'text'`` (or the row's position in its batch when the data has no ids)."""
    name = f"id={row_id!r}" if row_id is not None else f"#{position} of its batch (no id column)"
    return f"row {name}, column {column!r}"


def text_problem(value: Any, *, allow_empty: bool) -> str | None:
    """Why ``value`` cannot be embedded as a text (``None``: it can)."""
    if not isinstance(value, str):
        return f"expected a string, got {type(value).__name__}"
    if not allow_empty and not value.strip():
        return "empty text (pass allow_empty=True to embed it)"
    return None


def engine_problem(exc: Exception) -> str:
    """The engine's message for a one-row call, without its ``input 0: field 'text'`` (or ``'image':``) prefix."""
    return _ENGINE_PREFIX.sub("", str(exc))


def find_problems(values: Sequence[Any], columns: Sequence[str], prepare: Callable[[list[Any]], Any],
                  check: Callable[[Any], str | None]) -> dict[int, tuple[str, str]]:
    """Rows that ``check`` refuses or that ``prepare`` (the engine's validation of one row) raises for:
    ``{position: (column, message)}``. ``values`` holds one value per row (a tuple for several columns)."""
    problems: dict[int, tuple[str, str]] = {}
    for i, value in enumerate(values):
        parts = value if len(columns) > 1 else (value,)
        for column, part in zip(columns, parts):
            message = check(part)
            if message:
                problems[i] = (column, message)
                break
    for i, value in enumerate(values):
        if i in problems:
            continue
        try:
            prepare([value])
        except (ValueError, TypeError) as exc:
            column = columns[0] if len(columns) == 1 or "'query'" in str(exc) else columns[-1]
            problems[i] = (column, engine_problem(exc))
    return problems


def raise_first(problems: dict[int, tuple[str, str]], ids: list[Any]) -> None:
    """Raise :class:`RowError` for the first bad row, if any."""
    if problems:
        i = min(problems)
        column, message = problems[i]
        raise RowError(f"{describe_row(ids[i], i, column)}: {message}")


def error_column(problems: dict[int, tuple[str, str]], n: int) -> pa.Array:
    """The ``error`` column: ``"column 'text': message"`` for a bad row, null for the others."""
    return pa.array([f"column {problems[i][0]!r}: {problems[i][1]}" if i in problems else None for i in range(n)],
                    type=pa.string())


def scatter(values: Sequence[Any], keep: list[int], n: int) -> list[Any]:
    """``values`` (one per kept row) put back at their rows' positions, ``None`` elsewhere."""
    out: list[Any] = [None] * n
    for position, value in zip(keep, values):
        out[position] = value
    return out


def dense_column(vectors: np.ndarray, keep: list[int], n: int, dim: int) -> pa.Array:
    """Float32 vectors as a fixed-size list column of ``dim``, null for the rows not in ``keep``."""
    full = np.zeros((n, dim), dtype=np.float32)
    if keep:
        full[keep] = vectors
    mask = np.ones(n, dtype=bool)
    mask[keep] = False
    values = pa.array(full.reshape(-1), type=pa.float32())
    return pa.FixedSizeListArray.from_arrays(values, dim, mask=pa.array(mask) if mask.any() else None)


def output_column(name: str, values: Any, keep: list[int], n: int, dim: int) -> pa.Array:
    """The Arrow column of one engine output: ``dense`` fixed-size float32 lists, ``sparse`` maps from token id
    to weight, ``colbert`` lists of per-token float32 lists; null for failed rows."""
    if name == "dense":
        return dense_column(np.asarray(values, dtype=np.float32), keep, n, dim)
    if name == "sparse":
        rows = scatter([list(d.items()) for d in values], keep, n)
        return pa.array(rows, type=pa.map_(pa.int64(), pa.float32()))
    rows = scatter([np.asarray(v, dtype=np.float32).tolist() for v in values], keep, n)
    return pa.array(rows, type=pa.list_(pa.list_(pa.float32())))
