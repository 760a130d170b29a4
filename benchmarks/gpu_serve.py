"""bench_gpu.py's serving part: ``wde serve`` on the GPU, driven over 127.0.0.1 on its OpenAI route with base64
vectors (``encoding_format="base64"``, little-endian float32, as OpenAI's clients ask by default)."""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

from serve_load import concurrent_load
from wde_plugin_kit.serve import WDE, free_port

INPUTS_PER_REQUEST = {50: 256, 512: 32}  # about 13k and 16k tokens a request


def start_server(directory: Path, args, log_path: str, workers: int) -> tuple[subprocess.Popen, str]:
    """``wde serve`` on the model at ``directory`` with the benchmark's engine arguments and ``workers`` processes;
    waits until it is ready (with several workers, until every one listens)."""
    port = free_port()
    argv = [*WDE, "serve", str(directory),
            "--host", "127.0.0.1", "--port", str(port), "--served-model-name", "bge-base-shape",
            "--engine-arg", f"device={args.device}", "--engine-arg", f"dtype={args.dtype}",
            "--engine-arg", f"max_num_seqs={args.max_num_seqs}",
            "--engine-arg", f"max_num_batched_tokens={args.max_num_batched_tokens}",
            "--max-request-tokens", "1000000", "--payload-limit", "20000000", "--log-level", "info",
            "--workers", str(workers)]
    with open(log_path, "w") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.perf_counter() + 300
    while time.perf_counter() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"wde serve exited with {proc.returncode}:\n{Path(log_path).read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"{url}/ready", timeout=2) as response:
                ready = Path(log_path).read_text().count("Application startup complete")
                if response.status == 200 and ready >= workers:
                    return proc, url
                time.sleep(0.5)
        except OSError:
            time.sleep(0.5)
    stop(proc)
    raise RuntimeError(f"wde serve not ready after 300 s:\n{Path(log_path).read_text()[-3000:]}")


def stop(proc: subprocess.Popen) -> None:
    """SIGTERM the server's session, then SIGKILL what is left."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)


def serve_rates(directory: Path, args, texts: list[str], length: int) -> None:
    """:func:`serve_rate` for each of ``args.serve_workers`` (comma-separated worker counts)."""
    for workers in (int(n) for n in args.serve_workers.split(",")):
        serve_rate(directory, args, texts, length, workers)


def serve_rate(directory: Path, args, texts: list[str], length: int, workers: int) -> None:
    """Tokens/s through ``wde serve --workers N``: ``args.serve_clients`` clients sending batches of ``texts`` (all ``length``
    tokens) until every text was sent once, base64 vectors back; a warm-up load first, then ``args.rounds`` loads."""
    log_path = os.path.join(tempfile.gettempdir(), f"wde-serve-gpu-{length}-{workers}.log")
    proc, url = start_server(directory, args, log_path, workers)
    batch = INPUTS_PER_REQUEST.get(length, max(1, 16384 // length))
    tokens = [length] * len(texts)
    extra = {"encoding_format": "base64"}
    try:
        clients = args.serve_clients
        concurrent_load(f"{url}/v1/embeddings", "bge-base-shape", texts[:len(texts) // 4], tokens, clients, batch,
                        extra=extra)
        rates = []
        for r in range(args.rounds):
            result = concurrent_load(f"{url}/v1/embeddings", "bge-base-shape", texts, tokens, clients, batch,
                                     deadline=120.0, extra=extra)
            if result.errors:
                print(f"  serve round {r + 1}: {len(result.errors)} errors, first: {result.errors[0]}")
            rates.append(result.tokens_per_s)
            print(f"  serve round {r + 1}: {result.tokens_per_s:12.0f} tokens/s ({result.texts} texts in "
                  f"{result.seconds:.2f} s; p50 {1e3 * result.percentile(50):.0f} ms a request)", flush=True)
        rates.sort()
        print(f"  wde serve --workers {workers} (OpenAI route, base64, {clients} clients x {batch} inputs a "
              f"request): median {rates[len(rates) // 2]:.0f} tokens/s")
    finally:
        stop(proc)
