"""Sessions: ``nox`` runs the whole test suite (fast tier, then the real-weight tier)."""

from __future__ import annotations

import nox

nox.options.sessions = ["tests", "slow"]
nox.options.reuse_existing_virtualenvs = True

TORCH = "torch==2.13.0"  # the CPU build; an unpinned torch pulls a multi-GB CUDA build
PACKAGES = [".", "./plugins/wde-bert[default-model]"]
TEST_PLUGINS = ["./tests/plugins/wde-example"]


def install(session: nox.Session, *extra: str) -> None:
    """Install torch (pinned) first, then wde and its plugins, then ``extra``."""
    session.install(TORCH)
    session.install(*PACKAGES, *extra)


@nox.session
def tests(session: nox.Session) -> None:
    """The default tier: parity on random-weight and packaged models, plugins, CLI, errors."""
    install(session, *TEST_PLUGINS, "pytest", "sentence-transformers")
    session.run("pytest", "-m", "not slow", *session.posargs)


@nox.session
def slow(session: nox.Session) -> None:
    """The real-weight tier: larger corpora and models (run by CI after the default tier)."""
    install(session, *TEST_PLUGINS, "pytest", "sentence-transformers")
    session.run("pytest", "-m", "slow", *session.posargs, success_codes=[0, 5])


@nox.session
def bench(session: nox.Session) -> None:
    """wde against sentence-transformers on the first 2,000 wiki paragraphs (2 threads, fp32)."""
    install(session, "sentence-transformers")
    session.run("python", "benchmarks/bench_encode.py", *session.posargs)
