"""Tasks: the table from which ``Engine`` and ``AsyncEngine`` make their front-end methods; each method's
*prepare* function, ``prepare(context, *args, **kwargs) -> Call``, validates and tokenizes a call's inputs
before any batch runs and says how the per-request results become the method's return value. ``context`` is a
:class:`TaskContext`, the part of the engine a task uses; the prepare function's signature and docstring are the
front-end method's, written once."""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Callable

from wde_core.stages.request import Request


@dataclass(frozen=True)
class TaskContext:
    """What a prepare function uses of an engine: the pipeline (model, settings, engine arguments) and the stages a
    call goes through before any batch (input processor, tokenizer) and after (output processor)."""

    pipeline: Any
    input_processor: Any
    tokenizer: Any
    output_processor: Any


@dataclass
class Call:
    """A prepared front-end call: tokenized requests (indexed 0..n-1) and how to collect their results."""

    requests: list[Request]
    collect: Callable[[list[Any]], Any]


def long_input_policy(context, truncate: bool | str | None, *, chunk_ok: bool) -> bool | str:
    """``True`` (cut), ``False`` (refuse) or ``"chunk"``: the call's ``truncate``, else the engine argument
    ``long_inputs``."""
    if truncate is None:
        truncate = {"truncate": True, "error": False, "chunk": "chunk"}[context.pipeline.args.long_inputs]
    if truncate == "chunk":
        if not chunk_ok:
            raise ValueError("truncate='chunk' (long_inputs='chunk'): chunked long inputs serve the embed task "
                             "only; pass truncate=True or False")
        return "chunk"
    if not isinstance(truncate, bool):
        raise ValueError(f"truncate={truncate!r}: expected True, False, 'chunk' or None")
    return truncate


SHOW_PROGRESS = inspect.Parameter("show_progress", inspect.Parameter.KEYWORD_ONLY, default=False, annotation=bool)
_SELF = inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)


def front_end_method(name: str, prepare: Callable, *, is_async: bool = False,
                     extra: tuple[inspect.Parameter, ...] = ()) -> Callable:
    """The engine method ``name`` (bind it with ``__get__``): ``self.call(name, *args, **kwargs)``, awaited when
    ``is_async``, with ``prepare``'s docstring and signature (less its context), plus ``extra`` keyword parameters."""
    if is_async:
        async def method(self, *args: Any, **kwargs: Any) -> Any:
            return await self.call(name, *args, **kwargs)
    else:
        def method(self, *args: Any, **kwargs: Any) -> Any:
            return self.call(name, *args, **kwargs)
    method.__name__ = method.__qualname__ = name
    method.__doc__ = prepare.__doc__
    signature = inspect.signature(prepare)
    method.__signature__ = signature.replace(parameters=[_SELF, *list(signature.parameters.values())[1:], *extra])
    return method


def describe_methods(registry, link_task: str) -> str:
    """``"encode() and embed_tokens()"``: the front-end methods that serve models linked for ``link_task``."""
    names = [f"{method}()" for task in registry.tasks.values() if link_task in task.link_tasks
             for method in task.methods]
    return " and ".join(names) if len(names) < 3 else ", ".join(names[:-1]) + " and " + names[-1]
