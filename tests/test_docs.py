"""The README and ``docs/`` are checked (issue 24): every relative link resolves, every shell command of a
```bash / ```console / ```sh block is either run or listed below with the reason it is not, and every
```python block runs.

How each kind is checked:

- **Links**: every ``[text](target)`` that is not a URL names an existing file, and its ``#anchor`` a heading
  of that file (GitHub's slugs).
- **Commands**: each command line of a shell block must be a key of exactly one table: ``RUN`` (run for real
  in a scratch directory, exit status 0, and a check of what it printed or wrote; plain ``wde ARGS`` lines run
  one after another in one Python process, through the ``wde`` entry point as the script calls it, which
  saves the ~3 s of imports a process pays; lines with shell syntax run in ``bash``),
  ``SERVER`` (the ``wde serve`` command that is started in the background for ``AGAINST_SERVER``, the ``curl``
  lines, run against it) or ``NOT_RUN`` (with the reason). A command not run is still checked piece by
  piece: its ``wde`` invocations are parsed by the real ``wde`` group (click checks the subcommand, every
  option and its value's type), ``pip install`` names only projects of this checkout (and their extras)
  and the pinned torch, ``nox -s`` only sessions of ``noxfile.py`` (options after ``--`` must be options of
  the session's benchmark script), ``python benchmarks/X.py`` only existing scripts and options.
- **Python**: every ```python block of the README and ``docs/`` (except ``docs/plugin-guide.md``'s, left to
  its owner) runs, all in one process, each in a fresh namespace; those that talk to the server
  run in a second process once it is ready. ``PYTHON_NOT_RUN`` lists the blocks that need Ray; they are
  compiled and the ``wde_ray`` names they use must exist.

The models the examples name are stand-ins here: tiny random-weight models of the same architectures
(wde-plugin-kit's ``save_random_model``), put in a temporary hub cache under the names the docs use
(``BAAI/bge-m3`` with its two head files, ``BAAI/bge-reranker-v2-m3``, a CLIP as ``openai/clip-vit-base-patch32``,
a ``BertForTokenClassification`` as ``dslim/bert-base-NER``, a ``Qwen3ForCausalLM`` as ``Qwen/Qwen3-Reranker-0.6B``, a
``ColQwen2ForRetrieval`` as ``vidore/colqwen2-v1.0-hf``)
and in ``./my-bert-nli``, with
``HF_HUB_OFFLINE=1``. They prove the code runs as written, not the scores; the default model is the real
packaged all-MiniLM-L6-v2. ``wde`` is run through a script that calls the entry point ``pyproject.toml``
names, so the commands run this checkout's code even where an installed ``wde`` script is older.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import textwrap
import time
import tomllib
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
GUIDE = ROOT / "docs" / "plugin-guide.md"  # its python blocks are left to the guide's owner
SHELL = {"bash", "console", "sh"}
KNOWN_LANGUAGES = SHELL | {"python", "json", "nginx", "toml", "text"}
DOCS_PORT = "8080"  # the port the docs' server examples use; the test's server gets a free one instead


# --- reading the pages -------------------------------------------------------------------------------------
def rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


def fenced_blocks(page: Path) -> list[tuple[str, str, int]]:
    """(language, dedented text, first line number) of every fenced block of ``page``, indented ones too."""
    blocks, lines, i = [], page.read_text(encoding="utf-8").splitlines(), 0
    while i < len(lines):
        opening = re.match(r"^(\s*)```(\S*)\s*$", lines[i])
        if not opening:
            i += 1
            continue
        indent, language, start, body = len(opening.group(1)), opening.group(2), i + 1, []
        i += 1
        while i < len(lines) and lines[i].strip() != "```":
            body.append(lines[i][indent:] if lines[i][:indent].strip() == "" else lines[i])
            i += 1
        blocks.append((language, "\n".join(body) + "\n", start + 1))  # the line after the fence
        i += 1
    return blocks


def strip_comment(line: str) -> str:
    """``line`` without its trailing ``# comment`` (a ``#`` outside quotes, after a space or at the start)."""
    quote = None
    for k, ch in enumerate(line):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (k == 0 or line[k - 1].isspace()):
            return line[:k].rstrip()
    return line.rstrip()


def join_continued(lines: list[str]) -> list[str]:
    """Join lines that end with a backslash to the next one."""
    out, pending = [], ""
    for line in lines:
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1].rstrip() + " "
        else:
            out.append((pending + line.strip()) if pending else line)
            pending = ""
    return out


def shell_commands(language: str, text: str) -> list[tuple[str, list[str]]]:
    """(command, the output lines shown after it) for a shell block; bash/sh blocks show no output."""
    lines = text.splitlines()
    if language != "console":
        return [(cmd, []) for cmd in (strip_comment(c) for c in join_continued(lines)) if cmd.strip()]
    commands = []
    for line in join_continued(lines):
        if line.startswith("$ "):
            commands.append((strip_comment(line[2:]), []))
        elif line.strip():
            assert commands, f"output before any command: {line!r}"
            commands[-1][1].append(line)
    return commands


def all_blocks():
    return [(page, language, text, line) for page in PAGES for language, text, line in fenced_blocks(page)]


def doc_commands() -> dict[str, dict]:
    """Every command of every shell block: {command: {"where": [page:line...], "outputs": [shown lines...]}}."""
    found = {}
    for page, language, text, line in all_blocks():
        if language in SHELL:
            for command, output in shell_commands(language, text):
                entry = found.setdefault(command, {"where": [], "outputs": []})
                entry["where"].append(f"{rel(page)}:{line}")
                entry["outputs"].append(output)
    return found


def python_snippets() -> list[tuple[str, str]]:
    """(id, code) of every python block of the README and docs/ except the plugin guide."""
    return [(f"{rel(page)}:{line}", text) for page, language, text, line in all_blocks()
            if language == "python" and page != GUIDE]


# --- what each command is checked against ---------------------------------------------------------------------
def close(actual: str, shown: str) -> bool:
    """``shown`` equals ``actual`` up to runs of spaces and numbers within 1e-4 (floats vary by a few ulps)."""
    number = r"-?\d+\.\d+(?:e-?\d+)?"
    a, s = " ".join(actual.split()), " ".join(shown.split())
    if re.split(number, a) != re.split(number, s):
        return False
    return all(abs(float(x) - float(y)) <= 1e-4 for x, y in zip(re.findall(number, a), re.findall(number, s)))


def shows(stdout: str, shown: list[str]) -> None:
    """Every line the docs show after the command (``...`` elides lines; a line ending in ``, ...`` is a
    prefix) appears in the output, in the same order."""
    actual, at = stdout.splitlines(), 0
    for line in shown:
        if line.strip() == "...":
            continue
        prefix = line.rstrip().endswith(", ...")
        want = line.rstrip()[:-len(", ...")] if prefix else line
        for k in range(at, len(actual)):
            got = " ".join(actual[k].split())[:len(" ".join(want.split()))] if prefix else actual[k]
            if close(got, want):
                at = k + 1
                break
        else:
            raise AssertionError(f"the docs show {line!r}, which the command did not print (in this order):\n"
                                 + stdout[:3000])


def load_json_lines(text: str) -> list:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def quick_start_numbers() -> list[str]:
    """The first two values the README's Quick start says ``wde encode "Hello, world"`` prints, as written."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    said = re.search(r'This prints `\{"embedding": \[(-?[\d.]+)\.\.\., (-?[\d.]+)\.\.\.', readme)
    assert said, "the Quick start no longer says what wde encode prints"
    return [said.group(1), said.group(2)]


def check_vectors_npy(run, work):
    vectors = np.load(work / "vectors.npy")
    assert vectors.shape == (2, 384) and vectors.dtype == np.float32
    # the Quick start's `wde encode "Hello, world"`: the same text, the same vector, its values cut short
    assert [f"{v:.8f}"[:len(said)] for v, said in zip(vectors[0], quick_start_numbers())] == quick_start_numbers()


def check_pictures_npy(run, work):
    vectors = np.load(work / "pictures.npy")  # the text, then cat.png, then dog.png: 3 CLIP vectors
    assert vectors.shape == (3, 512) and vectors.dtype == np.float32
    assert np.abs(vectors[1] - vectors[2]).max() > 1e-3


def check_npy_with_ids(run, work):
    assert np.load(work / "out.npy").shape == (2, 384)
    assert json.loads((work / "out.ids.json").read_text()) == ["a", "b"]


def check_parquet(run, work):
    import pyarrow.parquet as pq

    table = pq.read_table(work / "out.parquet")
    assert table.num_rows == 2 and len(table.column("embedding")[0].as_py()) == 384


def check_stdin_jsonl(run, work):
    records = load_json_lines((work / "out.jsonl").read_text())
    assert len(records) == 2 and all(len(r["embedding"]) == 384 for r in records)


def check_rerank(run, work):
    ranked = json.loads(run.stdout)
    assert sorted(r["index"] for r in ranked) == [0, 1]
    assert ranked[0]["score"] >= ranked[1]["score"]


def check_plugin_new(name, package, architecture):
    def check(run, work):
        root = work / name
        for file in ("pyproject.toml", "README.md", f"{package}/plugin.py", f"{package}/model.py",
                     "tests/test_parity.py"):
            assert (root / file).is_file(), file
        assert architecture in (root / package / "plugin.py").read_text()
    return check


SHOWN = "every line the docs show after the command"  # a check: see shows()


def json_answer(check=None):
    def checked(run, work):
        answer = json.loads(run.stdout)
        assert not (isinstance(answer, dict) and "error" in answer), answer
        if check:
            assert check(answer), answer
    return checked


# Commands run for real, each with what it must have printed or written (exit status 0 is always checked).
RUN = {
    'wde encode "Hello, world" "Bonjour" --output vectors.npy': check_vectors_npy,
    'wde encode "Hello, world" "Second text" --dimensions 4': SHOWN,
    "wde encode --input in.jsonl --output out.npy": check_npy_with_ids,
    "wde encode -i docs.csv --column body -o out.parquet": check_parquet,
    "printf 'one\\ntwo\\n' | wde encode -o out.jsonl": check_stdin_jsonl,
    'wde rerank -m BAAI/bge-reranker-v2-m3 "what is a panda?" "The giant panda is a bear." "Paris is in France."':
        check_rerank,
    "wde inspect": SHOWN,
    "wde inspect --engine-arg executor=tensor_parallel --engine-arg tensor_parallel_size=2": SHOWN,
    "wde list-workflows": SHOWN,
    "wde list-tasks": SHOWN,
    "wde plugins": SHOWN,
    "wde plugin new wde-mymodel --architecture MyModel": check_plugin_new("wde-mymodel", "wde_mymodel", "MyModel"),
    "wde plugin new wde-my-vit --modality image --architecture MyViTModel":
        check_plugin_new("wde-my-vit", "wde_my_vit", "MyViTModel"),
    'wde encode -m openai/clip-vit-base-patch32 "a photo of a cat" --image cat.png --image dog.png -o pictures.npy':
        check_pictures_npy,
}

# Started in the background (on a free port) for the commands and python blocks that talk to a server.
SERVER = ("wde serve BAAI/bge-m3 BAAI/bge-reranker-v2-m3 --served-model-name bge-m3 --served-model-name reranker "
          "--calibration corpus-sample.txt")

# Run for real against SERVER (``localhost:8080`` becomes its port).
AGAINST_SERVER = {
    "curl -s localhost:8080/v1/embeddings -H 'content-type: application/json' -d '{\"input\": [\"hello\", \"world\"]}'":
        json_answer(lambda a: len(a["data"]) == 2),
    "curl -s localhost:8080/v1/embeddings -H 'content-type: application/json' -d '{\"model\": \"bge-m3\", \"input\": "
    "[\"hello\", \"world\"]}'": json_answer(lambda a: len(a["data"]) == 2 and a["model"] == "bge-m3"),
    "curl -s localhost:8080/v2/embed -H 'content-type: application/json' -d '{\"model\": \"bge-m3\", \"texts\": "
    "[\"hello\"], \"input_type\": \"search_query\", \"embedding_types\": [\"float\", \"ubinary\"]}'":
        json_answer(lambda a: {"float", "ubinary"} <= set(a["embeddings"])),
    "curl -s localhost:8080/v2/rerank -H 'content-type: application/json' -d '{\"model\": \"reranker\", \"query\": "
    "\"what is wde?\", \"documents\": [\"an engine\", \"a fruit\"], \"top_n\": 1}'":
        json_answer(lambda a: len(a["results"]) == 1),
    "curl -s 'localhost:8080/embed?model=bge-m3' -H 'content-type: application/json' -d '{\"inputs\": \"hello\", "
    "\"truncate\": true}'": json_answer(lambda a: len(a) == 1 and len(a[0]) > 1),
    "curl -s 'localhost:8080/embed_sparse?model=bge-m3' -H 'content-type: application/json' -d '{\"inputs\": "
    "[\"hello\"]}'": json_answer(lambda a: len(a) == 1 and all({"index", "value"} <= set(t) for t in a[0])),
    "curl -s localhost:8080/score -H 'content-type: application/json' -d '{\"model\": \"reranker\", \"text_1\": \"q\", "
    "\"text_2\": [\"a\", \"b\"]}'": json_answer(lambda a: len(a["data"]) == 2),
    "curl -s localhost:8080/ready": json_answer(),
}

# Not run here, and why. Each is still parsed piece by piece (see the module docstring).
NOT_RUN = {
    "python3 -m venv .venv && . .venv/bin/activate && pip install torch==2.13.0 . './plugins/wde-bert[default-model]' "
    "./plugins/wde-batch ./plugins/wde-cpu-kernels && wde encode \"Hello, world\"":
        "makes a virtualenv and installs torch and wde: minutes and the network (the same `wde encode` runs above, "
        "and its output is compared with what the Quick start says)",
    "bash .ci/run": "the whole CI: every test session, about half an hour",
    "pip install ./plugins/wde-server": "installs a package",
    "pip install . ./plugins/wde-plugin-kit": "installs packages",
    "wde serve": "a server that runs until stopped; SERVER, the two-model one, answers the README's curl instead",
    "wde serve BAAI/bge-m3 BAAI/bge-reranker-v2-m3 --served-model-name bge-m3 --served-model-name reranker "
    "--host 0.0.0.0 --port 8080 --engine-arg num_threads=8 --api-key \"$KEY\" --calibration corpus-sample.txt":
        "a server on every interface with a key from the environment; SERVER runs the same models",
    "wde serve BAAI/bge-base-en-v1.5 --workers 8 --host 0.0.0.0 --port 8080":
        "eight server processes on every interface; plugins/wde-server/tests/test_server_workers.py runs --workers 2",
    "wde serve-ray BAAI/bge-m3 --replicas 2 --address HEAD_IP:6379 --port 8080":
        "needs wde-ray and a Ray cluster (plugins/wde-ray/tests/test_ray.py, the ray session, serves on Ray)",
    "wde embed-dataset corpus.jsonl embedded/ --workers 2":
        "needs wde-ray and starts Ray (plugins/wde-ray/tests/test_ray.py runs it)",
    "wde embed-dataset parquet-folder/ embedded/ --address HEAD_IP:6379 --workers 32 --num-cpus 4 --model BAAI/bge-m3 "
    "--on-error null --engine-arg dtype=bfloat16": "needs wde-ray and a Ray cluster",
    "wde embed-dataset photos.parquet embedded/ --image-column image --model openai/clip-vit-base-patch32":
        "needs wde-ray, Ray and a CLIP model (plugins/wde-ray/tests/test_ray.py runs embed-dataset --image-column)",
    "nox -s bench": "a benchmark: minutes",
    "nox -s bench -- --n 500 --rounds 1 --threads 2": "a benchmark: minutes",
    "nox -s bench-rerank": "a benchmark: minutes",
    "nox -s bench-decoder": "a benchmark: minutes, and real decoder weights",
    "nox -s bench-families": "a benchmark: minutes",
    "nox -s bench-cpu": "a benchmark that builds vLLM's 3.5 GB virtualenv",
    "nox -s bench-serve": "a benchmark that builds vLLM's and Infinity's virtualenvs",
    "nox -s bench-ray": "a benchmark on Ray: minutes",
    "nox -s bench-vision": "a benchmark: builds a ViT-B/32-sized CLIP and runs for tens of minutes",
    "nox -s bench-vdr": "a benchmark: builds a ColQwen2-shaped model and runs for minutes",
    "nox -s bench-host": "a benchmark: builds a bge-base-shaped model and runs for minutes",
    "nox -s bench-gpu": "a benchmark that needs a CUDA GPU",
    "nox -s bench-attention": "a benchmark: MPNet-base's layer over 2,000 paragraphs, minutes",
}

# Python blocks not run, by a string each contains, and why.
PYTHON_NOT_RUN = {
    "wde_ray.embed(":
        "needs wde-ray and Ray (plugins/wde-ray/tests/test_ray.py checks embed and rerank on a local Ray)",
    "wde_ray.serve_app(": "needs wde-ray, Ray Serve and a GPU",
}
PYTHON_AGAINST_SERVER = ("OpenAI(base_url=",)


# --- the scratch directory and the runs ---------------------------------------------------------------------
def wde_entry_point() -> tuple[str, str]:
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["scripts"]
    module, function = scripts["wde"].split(":")
    return module, function


def make_stand_ins(work: Path) -> Path:
    """Tiny random models under the names the docs use: a hub cache, and ./my-bert-nli."""
    import torch
    from transformers import (BertConfig, BertForSequenceClassification, BertForTokenClassification, XLMRobertaConfig,
                              XLMRobertaForSequenceClassification, XLMRobertaModel)

    from conftest import save_random_clip, save_random_colqwen2, save_random_reranker
    from wde_plugin_kit import save_random_model

    hub = work / "hub"

    def snapshot(name: str) -> Path:
        repo = hub / ("models--" + name.replace("/", "--"))
        (repo / "refs").mkdir(parents=True)
        (repo / "refs" / "main").write_text("0" * 40)
        return repo / "snapshots" / ("0" * 40)

    xlmr = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                max_position_embeddings=130, type_vocab_size=1, pad_token_id=1, bos_token_id=0, eos_token_id=2)
    m3 = save_random_model(snapshot("BAAI/bge-m3"), XLMRobertaConfig(architectures=["XLMRobertaModel"], **xlmr),
                           model_class=XLMRobertaModel, tokenizer="bpe", st={"pooling": "cls", "normalize": True})
    torch.manual_seed(0)
    torch.save(torch.nn.Linear(32, 32).state_dict(), m3 / "colbert_linear.pt")
    torch.save(torch.nn.Linear(32, 1).state_dict(), m3 / "sparse_linear.pt")
    save_random_model(snapshot("BAAI/bge-reranker-v2-m3"),
                      XLMRobertaConfig(architectures=["XLMRobertaForSequenceClassification"], num_labels=1, **xlmr),
                      model_class=XLMRobertaForSequenceClassification, tokenizer="bpe")
    save_random_clip(snapshot("openai/clip-vit-base-patch32"), "clip", projection_dim=512)  # 512 wide, as the real
    save_random_reranker(snapshot("Qwen/Qwen3-Reranker-0.6B"), tied=False)
    save_random_colqwen2(snapshot("vidore/colqwen2-v1.0-hf"))
    conll = dict(enumerate(["O", "B-MISC", "I-MISC", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC"]))
    save_random_model(snapshot("dslim/bert-base-NER"), BertConfig(
        architectures=["BertForTokenClassification"], hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=64, max_position_embeddings=128, id2label=conll,
        label2id={v: k for k, v in conll.items()}), model_class=BertForTokenClassification)
    labels = {0: "contradiction", 1: "entailment", 2: "neutral"}
    save_random_model(work / "my-bert-nli", BertConfig(
        architectures=["BertForSequenceClassification"], hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=64, max_position_embeddings=128, num_labels=3, id2label=labels,
        label2id={v: k for k, v in labels.items()}), model_class=BertForSequenceClassification)
    return hub


def make_inputs(work: Path) -> None:
    (work / "in.jsonl").write_text('{"id": "a", "text": "first"}\n{"id": "b", "text": "second"}\n')
    (work / "docs.csv").write_text("id,body\n1,the first document\n2,the second document\n")
    from conftest import random_images

    for name, picture in zip(("cat.png", "dog.png"), random_images(2)):
        picture.save(work / name)
    (work / "corpus-sample.txt").write_text("".join(f"calibration text number {i}: a sentence about things.\n"
                                                    for i in range(16)))


def make_wde_script(work: Path) -> Path:
    module, function = wde_entry_point()
    bin_dir = work / "bin"
    bin_dir.mkdir()
    script = bin_dir / "wde"
    script.write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} -c 'import sys; sys.argv[0] = \"wde\"; "
                      f"from {module} import {function}; sys.exit({function}())' \"$@\"\n")
    script.chmod(0o755)
    return bin_dir


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Ran:
    def __init__(self, returncode, stdout, stderr, seconds):
        self.returncode, self.stdout, self.stderr, self.seconds = returncode, stdout, stderr, seconds

    def __repr__(self):
        return (f"exit {self.returncode} after {self.seconds:.1f} s\nstdout: {self.stdout[-2000:]}\n"
                f"stderr: {self.stderr[-3000:]}")


def run_shell(command: str, work: Path, env: dict, timeout: float = 180) -> Ran:
    start = time.perf_counter()
    try:
        proc = subprocess.run(["bash", "-c", command], cwd=work, env=env, capture_output=True, text=True,
                              timeout=timeout)
        return Ran(proc.returncode, proc.stdout, proc.stderr, time.perf_counter() - start)
    except subprocess.TimeoutExpired:
        return Ran(124, "", f"timed out after {timeout} s", time.perf_counter() - start)


def plain_wde(command: str) -> bool:
    """A ``wde ARGS`` line with no shell syntax (pipes, redirections, variables, several commands)."""
    parts = segments(command)
    return len(parts) == 1 and parts[0][0] == "wde" and not re.search(r"[$`<>]", command)


CLI_RUNNER = textwrap.dedent("""
    import contextlib, importlib, io, json, logging, os, shlex, sys, time, traceback
    module, function, todo, done = sys.argv[1:5]
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")  # to the real stderr
    entry = getattr(importlib.import_module(module), function)
    results = {}
    for command in json.load(open(todo)):
        out, err, start, code = io.StringIO(), io.StringIO(), time.perf_counter(), 0
        sys.argv = ["wde", *shlex.split(command)[1:]]
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                entry()
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            except BaseException:
                traceback.print_exc()
                code = 1
        results[command] = [code, out.getvalue(), err.getvalue(), time.perf_counter() - start]
    json.dump(results, open(done, "w"))
    sys.stdout.flush()
    os._exit(0)
""")


def run_plain_wde(commands: list[str], work: Path, env: dict, timeout: float = 300) -> dict[str, Ran]:
    """Run ``wde ARGS`` lines one after another in one Python process, each through the ``wde`` entry point with
    its arguments, as the script does: the same code, without paying the ~3 s of imports once per line."""
    (work / "cli.json").write_text(json.dumps(commands))
    try:
        proc = subprocess.run([sys.executable, "-c", CLI_RUNNER, *wde_entry_point(), "cli.json", "cli-results.json"],
                              cwd=work, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {c: Ran(124, "", f"the commands' process timed out after {timeout} s", timeout) for c in commands}
    if not (work / "cli-results.json").exists():
        return {c: Ran(1, "", f"the commands' process died: {proc.stderr[-3000:]}", 0) for c in commands}
    return {c: Ran(*ran) for c, ran in json.loads((work / "cli-results.json").read_text()).items()}


RUNNER = textwrap.dedent("""
    import json, os, sys, time, traceback
    snippets = json.load(open(sys.argv[1]))
    results = {}
    for name, code in snippets:
        start = time.perf_counter()
        try:
            exec(compile(code, name, "exec"), {"__name__": "__main__"})
            results[name] = {"ok": True, "seconds": time.perf_counter() - start}
        except BaseException:
            results[name] = {"ok": False, "error": traceback.format_exc(), "seconds": time.perf_counter() - start}
    json.dump(results, open(sys.argv[2], "w"))
    sys.stdout.flush()
    os._exit(0)  # engines' threads do not hold the process
""")


def run_snippets(snippets: list[tuple[str, str]], work: Path, env: dict, name: str, timeout: float = 240) -> dict:
    if not snippets:
        return {}
    (work / f"{name}.json").write_text(json.dumps(snippets))
    try:
        proc = subprocess.run([sys.executable, "-c", RUNNER, f"{name}.json", f"{name}-results.json"], cwd=work, env=env,
                              capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {n: {"ok": False, "error": f"the snippets' process timed out after {timeout} s"} for n, _ in snippets}
    results_file = work / f"{name}-results.json"
    if not results_file.exists():
        return {n: {"ok": False, "error": f"the snippets' process died: {proc.stderr[-3000:]}"} for n, _ in snippets}
    return json.loads(results_file.read_text())


def wait_ready(port: int, server: subprocess.Popen, timeout: float = 180) -> str | None:
    """None once ``/ready`` answers 200, else why not."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.poll() is not None:
            return f"wde serve exited with {server.returncode}"
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/ready", timeout=2) as answer:
                if answer.status == 200:
                    return None
        except OSError:
            pass
        time.sleep(0.25)
    return f"not ready after {timeout} s"


def snippet_matching(needle: str) -> list[str]:
    return [name for name, code in python_snippets() if needle in code]


@pytest.fixture(scope="module")
def docs_run(tmp_path_factory):
    """Run every command and python block the tables say to run, concurrently where they are independent."""
    work = tmp_path_factory.mktemp("docs")
    started = time.perf_counter()
    hub = make_stand_ins(work)
    make_inputs(work)
    env = {k: v for k, v in os.environ.items() if k not in ("WDE_DEFAULT_MODEL", "WDE_PLUGINS", "WDE_API_KEY")}
    env.update(PATH=f"{make_wde_script(work)}{os.pathsep}{env.get('PATH', '')}", HF_HUB_CACHE=str(hub),
               HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false",
               CUDA_VISIBLE_DEVICES="")  # the docs show what a CPU machine prints
    port = free_port()
    log = open(work / "server.log", "w")
    server = subprocess.Popen(["bash", "-c", f"exec {SERVER} --port {port} --log-level warning"], cwd=work, env=env,
                              stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    skip = {n for needle in (*PYTHON_NOT_RUN, *PYTHON_AGAINST_SERVER) for n in snippet_matching(needle)}
    offline = [(n, c) for n, c in python_snippets() if n not in skip]
    online = [(n, c.replace(f":{DOCS_PORT}", f":{port}")) for needle in PYTHON_AGAINST_SERVER
              for n, c in python_snippets() if needle in c]
    results = {"commands": {}, "python": {}}
    try:
        with ThreadPoolExecutor(max_workers=3) as pool:
            python_job = pool.submit(run_snippets, offline, work, env, "offline")
            plain_job = pool.submit(run_plain_wde, [c for c in RUN if plain_wde(c)], work, env)
            jobs = {command: pool.submit(run_shell, command, work, env) for command in RUN if not plain_wde(command)}
            results["python"].update(python_job.result())
            results["commands"].update(plain_job.result())
            results["commands"].update({command: job.result() for command, job in jobs.items()})
        results["server"] = wait_ready(port, server)
        if results["server"] is None:
            for command in AGAINST_SERVER:
                results["commands"][command] = run_shell(command.replace(f":{DOCS_PORT}", f":{port}"), work, env, 60)
            results["python"].update(run_snippets(online, work, env, "online"))
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            results["server_exit"] = server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            results["server_exit"] = server.wait()
        log.close()
    results["server_log"] = (work / "server.log").read_text()[-3000:]
    results["seconds"] = time.perf_counter() - started
    for name, ran in results["commands"].items():
        print(f"{ran.seconds:6.1f} s  {name[:100]}")
    for name, ran in results["python"].items():
        print(f"{ran.get('seconds', 0):6.1f} s  {name}")
    print(f"\ntest_docs: ran {len(results['commands'])} commands and {len(results['python'])} python blocks "
          f"in {results['seconds']:.1f} s")
    return work, results


# --- links ----------------------------------------------------------------------------------------------------
def slugs(page: Path) -> set[str]:
    """GitHub's anchors for the headings of ``page``."""
    seen, out, fenced = {}, set(), False
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        heading = None if fenced else re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if heading:
            slug = re.sub(r"[^\w\- ]", "", heading.group(1).strip().lower()).replace(" ", "-")
            n = seen.get(slug, 0)
            seen[slug] = n + 1
            out.add(slug if n == 0 else f"{slug}-{n}")
    return out


@pytest.mark.parametrize("page", PAGES, ids=rel)
def test_every_relative_link_resolves(page):
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    broken = []
    for target in re.findall(r"\[[^\]]*\]\(([^)\s]+)\)", text):
        if re.match(r"^[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.is_file():
            broken.append(f"{target}: no file {file}")
        elif anchor and file.suffix == ".md" and anchor not in slugs(file):
            broken.append(f"{target}: no heading with anchor #{anchor} in {rel(file)}")
    assert broken == []


def test_the_readme_is_short_and_links_every_docs_page():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 250
    for page in PAGES[1:]:
        assert f"]({rel(page)})" in readme, f"the README does not link {rel(page)}"


@pytest.mark.parametrize("page", PAGES, ids=rel)
def test_no_repository_or_model_hub_host_is_named(page):
    text = page.read_text(encoding="utf-8").lower()
    assert [h for h in ("github.com", "gitlab.com", "huggingface.co", "hf.co/", "pypi.org") if h in text] == []


def test_every_fenced_block_is_of_a_checked_kind():
    assert sorted({f"{rel(p)}:{line} {lang or '(none)'}" for p, lang, _, line in all_blocks()
                   if lang not in KNOWN_LANGUAGES}) == []


def test_json_blocks_parse():
    for page, language, text, line in all_blocks():
        if language == "json":
            json.loads(text)


# --- commands -------------------------------------------------------------------------------------------------
def test_every_command_in_the_docs_is_run_or_listed_with_a_reason():
    tables = [set(RUN), {SERVER}, set(AGAINST_SERVER), set(NOT_RUN)]
    found = doc_commands()
    unchecked = {c: found[c]["where"] for c in found if not any(c in t for t in tables)}
    assert unchecked == {}, "commands of the docs that no table of tests/test_docs.py checks"
    assert sorted(c for t in tables for c in t if c not in found) == [], "table entries the docs no longer have"
    assert sum(len(t) for t in tables) == len(set().union(*tables)), "a command in two tables"
    assert all(reason.strip() for reason in NOT_RUN.values())


@pytest.mark.parametrize("command", [*RUN, *AGAINST_SERVER])
def test_command_runs(docs_run, command):
    work, results = docs_run
    if command in AGAINST_SERVER:
        assert results["server"] is None, f"{results['server']}\n{results['server_log']}"
    run = results["commands"][command]
    assert run.returncode == 0, run
    check = RUN.get(command) or AGAINST_SERVER[command]
    if check == SHOWN:
        for output in doc_commands()[command]["outputs"]:
            shows(run.stdout, output)
    else:
        check(run, work)


def test_the_server_started_served_and_stopped(docs_run):
    work, results = docs_run
    assert results["server"] is None, f"{results['server']}\n{results['server_log']}"
    assert results["server_exit"] == 0, results["server_log"]  # SIGTERM: finish, close the engines, exit 0


def segments(command: str) -> list[list[str]]:
    """The simple commands of a command line, split at ``&&``, ``||``, ``;``, ``|`` and ``&``."""
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    parts, current = [], []
    for token in lexer:
        if token in ("&&", "||", ";", "|", "&"):
            parts.append(current)
            current = []
        else:
            current.append(token)
    return [p for p in parts + [current] if p]


def nox_sessions() -> dict[str, str | None]:
    """{session name: the benchmarks/ script it runs, if any} from noxfile.py."""
    sessions = {}
    for node in ast.parse((ROOT / "noxfile.py").read_text(encoding="utf-8")).body:
        if not isinstance(node, ast.FunctionDef):
            continue
        for decorator in node.decorator_list:
            call = decorator if isinstance(decorator, ast.Call) else None
            target = call.func if call else decorator
            if ast.unparse(target) != "nox.session":
                continue
            named = [k.value.value for k in (call.keywords if call else []) if k.arg == "name"]
            scripts = [c.value for c in ast.walk(node) if isinstance(c, ast.Constant) and isinstance(c.value, str)
                       and c.value.endswith(".py")]
            sessions[named[0] if named else node.name] = Path(scripts[0]).name if scripts else None
    return sessions


def script_options(script: str) -> set[str]:
    text = "".join((ROOT / "benchmarks" / name).read_text(encoding="utf-8") for name in (script, "common.py"))
    return set(re.findall(r"add_argument\(\s*[\"'](--[\w-]+)", text))


def local_projects() -> dict[str, Path]:
    return {tomllib.loads(p.read_text(encoding="utf-8"))["project"]["name"]: p.parent
            for p in [ROOT / "pyproject.toml", *ROOT.glob("plugins/*/pyproject.toml")]}


def check_pip(args: list[str]) -> None:
    assert args[:1] == ["install"], args
    pin = re.search(r'TORCH = "([^"]+)"', (ROOT / "noxfile.py").read_text()).group(1)
    for arg in (a for a in args[1:] if not a.startswith("-")):
        name, extras = re.match(r"^([^\[]+)(?:\[(.*)\])?$", arg).groups()
        if name.startswith("torch"):
            assert arg == pin, f"{arg}: the noxfile pins {pin}"
            continue
        directory = (ROOT / name) if name.startswith(".") else local_projects().get(name)
        assert directory is not None and (directory / "pyproject.toml").is_file(), f"{arg}: not a project here"
        declared = tomllib.loads((directory / "pyproject.toml").read_text())["project"].get("optional-dependencies", {})
        assert not extras or set(extras.split(",")) <= set(declared), f"{arg}: no such extra"


def check_nox(args: list[str]) -> None:
    sessions = nox_sessions()
    own, script_args = (args[:args.index("--")], args[args.index("--") + 1:]) if "--" in args else (args, [])
    names = [own[k + 1] for k, a in enumerate(own[:-1]) if a in ("-s", "--session")]
    assert names and all(n in sessions for n in names), f"nox {' '.join(args)}: the sessions are {sorted(sessions)}"
    for option in (a.split("=")[0] for a in script_args if a.startswith("--")):
        assert all(sessions[n] and option in script_options(sessions[n]) for n in names), f"{option}: not an option"


def check_segment(words: list[str], wde_calls: list[list[str]]) -> None:
    program, args = words[0], words[1:]
    if program == "wde":
        wde_calls.append(args)
    elif program == "pip":
        check_pip(args)
    elif program in ("python", "python3") and args[:2] == ["-m", "venv"]:
        pass
    elif program in ("python", "python3") and args and args[0].startswith("benchmarks/"):
        assert (ROOT / args[0]).is_file(), args[0]
        unknown = {a for a in args[1:] if a.startswith("--")} - script_options(Path(args[0]).name)
        assert unknown == set(), f"{args[0]}: no options {unknown}"
    elif program in (".", "source"):
        assert args and args[0].endswith("/activate")
    elif program == "bash" and args[:1] == [".ci/run"]:
        assert (ROOT / ".ci" / "run").is_file()
        if args[1:]:
            check_nox(args[1:])
    elif program in ("nox", ".ci-venv/bin/nox"):
        check_nox(args)
    else:
        raise AssertionError(f"no check for {program!r} in a command that is not run: add one to tests/test_docs.py")


PARSER = textwrap.dedent("""
    import importlib, importlib.util, json, sys
    import click
    module, function, ray_cli = sys.argv[1:4]
    captured = {}
    click.Command.main = lambda self, *a, **k: captured.setdefault("group", self)
    getattr(importlib.import_module(module), function)()  # the entry point: plugins add their commands
    group = captured["group"]
    if "embed-dataset" not in group.commands:  # wde-ray not installed (no Ray here): its commands all the same
        spec = importlib.util.spec_from_file_location("docs_wde_ray_cli", ray_cli)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        for command in vars(mod).values():
            if isinstance(command, click.Command) and command.name not in group.commands:
                group.add_command(command)
    def rest_of(ctx):  # what a group left for its subcommand (click 8.2 made protected_args private)
        protected = ctx.__dict__.get("_protected_args")
        return [*(ctx.protected_args if protected is None else protected), *ctx.args]
    results = []
    for args in json.loads(sys.stdin.read()):
        try:
            ctx = group.make_context("wde", list(args))
            command = group
            while isinstance(command, click.Group):
                name, command, rest = command.resolve_command(ctx, rest_of(ctx))
                ctx = command.make_context(name, rest, parent=ctx)
            results.append(None)
        except click.exceptions.Exit:
            results.append(None)
        except Exception as exc:
            results.append(f"{type(exc).__name__}: {getattr(exc, 'format_message', lambda: str(exc))()}")
    print(json.dumps(results))
""")


# Calls the parse check must refuse, so that it is known to check something.
NOT_WDE = [["serve", "--no-such-flag"], ["encode", "--dimensions", "many"], ["no-such-command"],
           ["embed-dataset", "only-one-argument"]]


def test_commands_not_run_parse(tmp_path):
    """Every command that is not run (and SERVER's own flags) checked piece by piece; its ``wde`` calls parsed
    by the real ``wde`` group, in one process, in a directory where the files they name exist."""
    wde_calls, failures = [], {}
    for command in [*NOT_RUN, SERVER]:
        try:
            for words in segments(command):
                check_segment(words, wde_calls)
        except AssertionError as exc:
            failures[command] = str(exc)
    assert failures == {}
    assert len(wde_calls) >= 6
    make_inputs(tmp_path)
    proc = subprocess.run([sys.executable, "-c", PARSER, *wde_entry_point(),
                           str(ROOT / "plugins" / "wde-ray" / "wde_ray" / "cli.py")],
                          input=json.dumps(wde_calls + NOT_WDE), cwd=tmp_path, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    parsed = json.loads(proc.stdout.splitlines()[-1])
    assert {" ".join(call): why for call, why in zip(wde_calls, parsed) if why} == {}
    assert all(parsed[len(wde_calls):]), f"calls that should not parse did: {parsed[len(wde_calls):]}"


# --- python ---------------------------------------------------------------------------------------------------
def test_every_python_block_is_run_or_listed():
    for needle in (*PYTHON_NOT_RUN, *PYTHON_AGAINST_SERVER):
        assert len(snippet_matching(needle)) == 1, f"{needle!r} should name exactly one python block"
    assert len(python_snippets()) >= 7


@pytest.mark.parametrize("name", [n for n, _ in python_snippets()
                                  if not any(needle in dict(python_snippets())[n] for needle in PYTHON_NOT_RUN)])
def test_python_block_runs(docs_run, name):
    work, results = docs_run
    if any(n == name for needle in PYTHON_AGAINST_SERVER for n in snippet_matching(needle)):
        assert results["server"] is None, f"{results['server']}\n{results['server_log']}"
    outcome = results["python"][name]
    assert outcome["ok"], outcome["error"]


@pytest.mark.parametrize("needle", PYTHON_NOT_RUN)
def test_python_block_not_run_compiles_and_names_real_functions(needle):
    [name] = snippet_matching(needle)
    code = dict(python_snippets())[name]
    compile(code, name, "exec")
    init = ast.parse((ROOT / "plugins" / "wde-ray" / "wde_ray" / "__init__.py").read_text(encoding="utf-8"))
    exported = next(ast.literal_eval(n.value) for n in init.body if isinstance(n, ast.Assign)
                    and any(isinstance(t, ast.Name) and t.id == "__all__" for t in n.targets))
    assert set(re.findall(r"wde_ray\.(\w+)", code)) <= set(exported)
