"""``wde serve --workers N`` as real processes on a loopback port: N workers listening on one port (SO_REUSEPORT),
each answering as the in-process Engine; SIGTERM stops them all (exit 0); a worker that dies stops the others."""

from __future__ import annotations

import os
import signal
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
