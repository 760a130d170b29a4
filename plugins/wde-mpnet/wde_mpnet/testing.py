"""An MPNet tokenizer for random-weight test and benchmark models: MPNet's special tokens, any WordPiece vocabulary."""

from __future__ import annotations

from pathlib import Path

MPNET_SPECIALS = ("<s>", "<pad>", "</s>", "<unk>")  # ids 0..3, as in microsoft/mpnet-base; <pad> = padding_idx 1


def mpnet_tokenizer(directory, vocab_file, *, model_max_length: int = 512) -> int:
    """Write an ``MPNetTokenizer`` (``<s> A </s>``, pairs ``<s> A </s></s> B </s>``) whose vocabulary is MPNet's
    specials, then ``vocab_file``'s tokens (a BERT ``vocab.txt``, its ``[UNK]`` kept as the unknown token),
    then ``<mask>``; return the vocabulary size."""
    from transformers import MPNetTokenizer

    words = Path(vocab_file).read_text(encoding="utf-8").splitlines()
    tokens = list(dict.fromkeys([*MPNET_SPECIALS, *(w for w in words if w), "<mask>"]))
    tokenizer = MPNetTokenizer(vocab={t: i for i, t in enumerate(tokens)}, unk_token="[UNK]",
                               model_max_length=model_max_length)
    tokenizer.save_pretrained(str(directory))
    return len(tokens)
