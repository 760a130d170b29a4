"""``wde serve --workers N`` as real processes on a loopback port: N workers listening on one port (SO_REUSEPORT),
each answering as the in-process Engine; SIGTERM stops them all (exit 0); a worker that dies stops the others."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np
import pytest

from wde_plugin_kit.serve import ServeProcess
from wde_server.workers import worker_argv


def listeners(port: int) -> int:
    """How many TCP sockets listen on ``port`` (``/proc/net/tcp``: state 0A)."""
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        if os.path.exists(table):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()
                count += int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] == "0A"
    return count


def children(pid: int) -> list[int]:
    """The live processes whose parent is ``pid``."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry))
    return found


def wait_for(condition, seconds: float = 120) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.2)
    return False


def test_worker_argv_drops_workers_and_marks_the_worker():
    assert worker_argv(["serve", "m", "--workers", "3", "--port", "9"]) == ["serve", "m", "--port", "9",
                                                                            "--reuse-port-worker"]
    assert worker_argv(["serve", "--workers=2"]) == ["serve", "--reuse-port-worker"]


@pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="reads /proc (Linux)")
def test_workers_share_the_port_answer_as_the_engine_and_stop_together(tiny_bert_dir, tmp_path):
    from wde_core import Engine

    texts = [f"text number {i} about workers" for i in range(24)]
    expected = Engine(str(tiny_bert_dir), device="cpu").encode(texts)
    server = ServeProcess(str(tiny_bert_dir), "--workers", "2", "--served-model-name", "m", log=tmp_path / "a.log")
    try:
        assert wait_for(lambda: listeners(server.port) == 2), server.log()
        workers = children(server.proc.pid)
        assert len(workers) == 2
        for i, text in enumerate(texts):  # a connection each: the kernel spreads them over the workers
            answer = httpx.post(f"{server.url}/v1/embeddings", json={"model": "m", "input": text}, timeout=30)
            assert answer.status_code == 200, answer.text
            assert np.abs(np.array(answer.json()["data"][0]["embedding"]) - expected[i]).max() <= 1e-6
        started = {line.split("[")[1].split("]")[0] for line in server.log().splitlines()
                   if "Started server process" in line}
        assert started == {str(pid) for pid in workers}
    finally:
        status = server.stop(signal.SIGTERM)
    assert status == 0, server.log()
    assert all(gone(pid) for pid in workers)

    server = ServeProcess(str(tiny_bert_dir), "--workers", "2", log=tmp_path / "b.log")
    try:
        assert wait_for(lambda: len(children(server.proc.pid)) == 2), server.log()
        workers = children(server.proc.pid)
        os.kill(workers[0], signal.SIGKILL)
        server.proc.wait(60)  # the parent stops the other worker and exits with the dead one's status
        assert server.proc.returncode != 0
        assert "a worker exited with status -9; stopping the others" in server.log()
        assert wait_for(lambda: all(gone(pid) for pid in workers), 30)
    finally:
        server.stop()


def gone(pid: int) -> bool:
    """Whether process ``pid`` has exited (a zombie waiting for its parent counts as exited)."""
    try:
        return "zombie" in Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return True


LATE_UVICORN = """
import sys, time, uvicorn
run = uvicorn.Server.run
def late_run(self, *args, **kwargs):  # the window between the engines' load and uvicorn's own signal handlers
    print("BEFORE-UVICORN", file=sys.stderr, flush=True)
    time.sleep(3)
    return run(self, *args, **kwargs)
uvicorn.Server.run = late_run
from wde_core.cli.main import main
main()
"""


def test_a_sigterm_before_uvicorn_takes_the_signals_still_stops_the_server(tiny_bert_dir):
    """A worker told to stop by ``--workers``' parent right after its engines loaded, before uvicorn installed its
    handlers, once swallowed the signal and then served on (the parent waited for it forever)."""
    proc = subprocess.Popen([sys.executable, "-c", LATE_UVICORN, "serve", str(tiny_bert_dir), "--host", "127.0.0.1",
                             "--port", "0"], stderr=subprocess.PIPE, text=True)
    try:
        lines = []
        while "BEFORE-UVICORN" not in "".join(lines) and proc.poll() is None and len(lines) < 500:
            lines.append(proc.stderr.readline())
        assert proc.poll() is None, "".join(lines)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
    finally:
        proc.kill()
        proc.wait()
