"""``WDE_TRACE_PLUGINS=1``: every hook call on stderr, with the plugins that implement it, what they answered
and how long it took (the model is datasette's ``DATASETTE_TRACE_PLUGINS``). Registration hooks are called one
plugin at a time, so each line names the plugin that ran."""

from __future__ import annotations

import os
import sys
import time
from typing import Any

TRACE_ENV = "WDE_TRACE_PLUGINS"


def trace_hook_calls(pm) -> None:
    """Print every hook call of the pluggy manager ``pm`` to stderr when ``WDE_TRACE_PLUGINS`` is set (not ``0``)."""
    if os.environ.get(TRACE_ENV, "0") in ("", "0"):
        return
    started: list[float] = []

    def after(outcome, hook_name: str, impls, kwargs) -> None:
        ms = (time.perf_counter() - started.pop()) * 1e3
        shown = ", ".join(f"{k}={_short(v)}" for k, v in kwargs.items() if not callable(v))
        plugins = ", ".join(impl.plugin_name for impl in impls) or "no plugin"
        answer = outcome.exception and f" raised {outcome.exception!r}" or _answer(outcome.get_result())
        print(f"wde trace: {hook_name}({shown}) by {plugins}{answer} in {ms:.2f} ms", file=sys.stderr)

    pm.add_hookcall_monitoring(lambda *_: started.append(time.perf_counter()), after)


def _answer(result: Any) -> str:
    quiet = result is None or (isinstance(result, list) and all(r is None for r in result))
    return "" if quiet else f" -> {_short(result)}"


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."
