"""`wde embed-dataset` on Ray (1 and 2 actors of 1 thread) against `wde encode` (one in-process Engine, 2 threads):
the first 2,000 wiki paragraphs, JSON lines in, end to end (process start, model load, read, embed, write), in
alternating rounds; median tokens/s, the ratios, and the peak memory (RSS) of every actor and of `wde encode`.

The Ray runs join a local Ray that this script starts once (3 logical CPUs: one per actor and one for Ray Data's
read/write tasks), as a job joins a running cluster; the actors' start and model load count in their time.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

from common import load_corpus, measure, parser

WDE = [sys.executable, "-c", "from wde_core.cli.main import main; main()"]


class PeakMemory:
    """Polls the processes under this one every 0.1 s: the peak RSS of each whose command matches (and that did
    not already match when polling began)."""

    def __init__(self, match: str) -> None:
        self.match, self.peaks, self.pids = match, {}, set()
        self.before = set(self._matching())  # a process of the last run still shutting down is not this run's
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def __enter__(self) -> "PeakMemory":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _matching(self) -> dict[int, psutil.Process]:
        found = {}
        for p in psutil.Process().children(recursive=True):
            try:
                if p.pid in self.pids or self.match in " ".join(p.cmdline()):
                    found[p.pid] = p
            except psutil.Error:
                continue
        return found

    def _poll(self) -> None:
        while not self._stop.wait(0.1):
            for pid, p in self._matching().items():
                if pid in self.before:
                    continue
                self.pids.add(pid)
                try:
                    self.peaks[pid] = max(self.peaks.get(pid, 0), p.memory_info().rss)
                except psutil.Error:
                    continue


def run_command(args: list[str], match: str) -> tuple[float, list[int]]:
    """Run a ``wde`` command; ``(seconds, peak RSS of each process matching ``match``)``."""
    with PeakMemory(match) as memory:
        start = time.perf_counter()
        done = subprocess.run([*WDE, *args], capture_output=True, text=True)
        seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"wde {' '.join(args)} failed:\n{done.stderr[-3000:]}")
    return seconds, sorted(memory.peaks.values())


def count_tokens(texts: list[str]) -> int:
    """Tokens the default model sees for ``texts`` (special tokens included, truncated as encode does)."""
    from wde_core import Engine

    with Engine() as engine:
        return sum(r.num_tokens for r in engine.prepare("encode", texts).requests)


def main() -> None:
    """Alternating rounds of the three runs; print medians, ratios and peak memory."""
    import ray

    args = parser(__doc__).parse_args()
    texts = load_corpus(2000)
    tokens = count_tokens(texts)
    work = Path(tempfile.mkdtemp(prefix="bench-ray-"))
    source = work / "in.jsonl"
    source.write_text("".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in enumerate(texts)))
    ray.init(num_cpus=3, include_dashboard=False, log_to_driver=False)
    address = ray.get_runtime_context().gcs_address
    print(f"{len(texts)} paragraphs, {tokens} tokens; Ray at {address}; {args.rounds} rounds", flush=True)
    memory: dict[str, list[int]] = {}

    def runner(name: str, command: list[str], match: str, clear: Path | None = None):
        def run():
            if clear is not None:
                shutil.rmtree(clear, ignore_errors=True)  # embed-dataset's OUTPUT folder from the last round
            seconds, peaks = run_command(command, match)
            memory[name] = peaks
            return seconds, None
        return run

    runners = {"wde encode (2 threads)": runner("wde encode (2 threads)", [
        "encode", "-i", str(source), "-o", str(work / "out.npy"), "--num-threads", str(args.threads)], "encode")}
    for workers in (1, 2):
        name = f"embed-dataset ({workers} actor{'s' * (workers > 1)} x 1 thread)"
        out = work / f"out-{workers}"
        runners[name] = runner(name, ["embed-dataset", str(source), str(out), "--workers", str(workers),
                                      "--address", address, "--engine-arg", "num_threads=1"], "MapWorker", out)
    medians, _ = measure(runners, args.rounds, tokens)
    base = medians["wde encode (2 threads)"]
    for name, speed in medians.items():
        peaks = ", ".join(f"{p / 2**20:.0f} MiB" for p in memory[name])
        print(f"{name:<36} {speed:8.0f} tokens/s  {speed / base:5.2f}x of in-process  peak RSS: {peaks}")
    ray.shutdown()


if __name__ == "__main__":
    main()
