"""``wde serve`` as a real process on a free loopback port, for a plugin's server tests (needs httpx)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

WDE = [sys.executable, "-c", "from wde_core.cli.main import main; main()"]  # the `wde` command of this Python


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServeProcess:
    """``wde serve ARGS`` (or another serving ``command``, such as wde-ray's ``serve-ray``) on 127.0.0.1; ``url``
    once ``/health`` answers. Stop with :meth:`stop`."""

    def __init__(self, *args: str, log: Path, env: dict[str, str] | None = None, timeout: float = 180,
                 command: str = "serve") -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log
        self._log = open(log, "w")
        self.proc = subprocess.Popen([*WDE, command, *args, "--host", "127.0.0.1", "--port", str(self.port)],
                                     stdout=self._log, stderr=subprocess.STDOUT,
                                     env={**os.environ, **(env or {})})
        self.wait_ready(timeout)

    def wait_ready(self, timeout: float) -> None:
        """Wait until the port accepts and ``/health`` answers (raise with the log if the process exits)."""
        import httpx

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"wde serve exited with {self.proc.returncode}:\n{self.log()}")
            try:
                httpx.get(self.url + "/health", timeout=2)
                return
            except httpx.TransportError:
                time.sleep(0.2)
        self.stop()
        raise TimeoutError(f"wde serve did not open port {self.port} in {timeout} s:\n{self.log()}")

    def log(self) -> str:
        """What the process printed so far."""
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text(errors="replace")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60) -> int:
        """Send ``sig`` and wait for the exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        return self.proc.returncode
