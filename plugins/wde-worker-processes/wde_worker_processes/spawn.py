"""The engine process's side of starting a worker process: spawn it with a pipe, then wait until it has loaded
its model or say why it could not (the traceback it sent, or its exit code and the likely cause)."""

from __future__ import annotations

from typing import Any, Callable


def spawn(ctx, target: Callable, args: tuple, name: str):
    """Start ``target(child_conn, *args)`` in a daemon process of ``ctx``: (the process, the parent's pipe end)."""
    parent, child = ctx.Pipe()
    process = ctx.Process(target=target, args=(child, *args), name=name, daemon=True)
    process.start()
    child.close()
    return process, parent


def await_ready(conn, process, who: str, kind: str, error: type[Exception], abort: Callable[[], None]) -> Any:
    """The detail ``process`` sends once ready; if it failed or exited instead, ``abort()`` and raise ``error``
    naming ``who`` (``"replica 0"``, ``"tensor_parallel rank 1"``) and the ``kind`` of executor."""
    try:
        status, detail = conn.recv()
    except EOFError:
        process.join(timeout=5)
        abort()
        raise error(f"{who} exited while loading the model (exit code {process.exitcode}); started from a script, "
                    f"{kind} needs the script's work under `if __name__ == \"__main__\":`") from None
    if status == "failed":
        abort()
        raise error(f"{who} failed while loading the model:\n{detail}")
    return detail
