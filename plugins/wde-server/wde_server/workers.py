"""``wde serve --workers N``: N server processes sharing one port (``SO_REUSEPORT``: the kernel spreads connections
over them), each with its own engines, so a replica of every model per process. One process's Python (parsing,
tokenizing, scheduling, encoding responses, all under one GIL) is what limits a server feeding a GPU; N of them
feed it N times as much. The parent loads nothing: it starts the workers, passes SIGTERM/SIGINT on, and stops them
all when one dies."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time

import click

WORKER_FLAG = "--reuse-port-worker"  # hidden: how the parent starts each worker
WDE = [sys.executable, "-c", "from wde_core.cli.main import main; main()"]


def worker_argv(argv: list[str]) -> list[str]:
    """The parent's ``wde`` arguments with ``--workers`` dropped and the worker flag added."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--workers":
            skip = True
        elif not arg.startswith("--workers="):
            out.append(arg)
    return [*out, WORKER_FLAG]


def reuse_port_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host:port`` with ``SO_REUSEPORT``, not yet listening: uvicorn listens once the
    worker's models are warm, so the kernel sends it no connection before."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    return sock


def check_workers(workers: int, port: int) -> None:
    """``--workers`` needs a fixed port (with port 0 each worker would get its own) and ``SO_REUSEPORT``."""
    if workers > 1 and port == 0:
        raise click.BadParameter("--workers > 1 needs a fixed --port (port 0 gives each worker its own)",
                                 param_hint="--workers")
    if workers > 1 and not hasattr(socket, "SO_REUSEPORT"):
        raise click.BadParameter("--workers > 1 needs SO_REUSEPORT, which this platform lacks",
                                 param_hint="--workers")


def run_workers(workers: int, graceful_timeout: float) -> int:
    """Start ``workers`` copies of this ``wde serve`` command as workers and wait for them; SIGTERM/SIGINT go on
    to every worker, and a worker that exits on its own stops the others. The exit status: 0 after a signal when
    every worker stopped cleanly, else the first failed worker's."""
    argv = worker_argv(sys.argv[1:])
    procs = [subprocess.Popen([*WDE, *argv]) for _ in range(workers)]
    state = {"stopping": False, "status": 0}

    def stop(*_: object) -> None:
        state["stopping"] = True
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, stop)
    while any(proc.poll() is None for proc in procs):
        failed = [proc.returncode for proc in procs if proc.returncode not in (None, 0)]
        if failed and not state["stopping"]:
            click.echo(f"wde serve: a worker exited with status {failed[0]}; stopping the others", err=True)
            state["status"] = failed[0]
            stop()
        time.sleep(0.2)
    deadline = time.monotonic() + graceful_timeout + 10
    for proc in procs:
        try:
            proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    codes = [proc.returncode for proc in procs]
    return state["status"] or next((c for c in codes if c not in (0, -signal.SIGTERM)), 0)
