"""Tasks: the table from which ``Engine`` and ``AsyncEngine`` make their front-end methods; each method's
*prepare* function, ``prepare(engine, *args, **kwargs) -> Call``, validates and tokenizes a call's inputs
before any batch runs and says how the per-request results become the method's return value."""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Callable

from wde_core.runtime.request import Request


@dataclass
class Call:
    """A prepared front-end call: tokenized requests (indexed 0..n-1) and how to collect their results."""

    requests: list[Request]
    collect: Callable[[list[Any]], Any]


def long_input_policy(engine, truncate: bool | str | None, *, chunk_ok: bool) -> bool | str:
    """``True`` (cut), ``False`` (refuse) or ``"chunk"``: the call's ``truncate``, else the engine's
    ``long_inputs`` argument."""
    if truncate is None:
        truncate = {"truncate": True, "error": False, "chunk": "chunk"}[engine.pipeline.args.long_inputs]
    if truncate == "chunk":
        if not chunk_ok:
            raise ValueError("truncate='chunk' (long_inputs='chunk'): chunked long inputs serve the embed task "
                             "only; pass truncate=True or False")
        return "chunk"
    if not isinstance(truncate, bool):
        raise ValueError(f"truncate={truncate!r}: expected True, False, 'chunk' or None")
    return truncate


def front_end_method(name: str, prepare: Callable, call: Callable, *, is_async: bool,
                     extra: tuple[inspect.Parameter, ...] = ()) -> Callable:
    """The front-end method ``name``: calls ``call(name, *args, **kwargs)`` (awaited when ``is_async``),
    with the docstring of ``prepare`` and its signature less ``engine``, plus ``extra`` keyword parameters."""
    if is_async:
        async def method(*args: Any, **kwargs: Any) -> Any:
            return await call(name, *args, **kwargs)
    else:
        def method(*args: Any, **kwargs: Any) -> Any:
            return call(name, *args, **kwargs)
    method.__name__ = method.__qualname__ = name
    method.__doc__ = prepare.__doc__
    signature = inspect.signature(prepare)
    method.__signature__ = signature.replace(parameters=list(signature.parameters.values())[1:] + list(extra))
    return method


def describe_methods(registry, link_task: str) -> str:
    """``"encode() and embed_tokens()"``: the front-end methods that serve models linked for ``link_task``."""
    names = [f"{method}()" for task in registry.tasks.values() if link_task in task.link_tasks
             for method in task.methods]
    return " and ".join(names) if len(names) < 3 else ", ".join(names[:-1]) + " and " + names[-1]
