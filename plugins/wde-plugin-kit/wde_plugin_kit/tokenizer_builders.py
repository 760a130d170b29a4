"""Tiny deterministic tokenizers for random-weight models: a BERT WordPiece and a RoBERTa byte-level BPE."""

from __future__ import annotations

import json
from pathlib import Path

WORDPIECE_SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
BPE_SPECIALS = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
BPE_VOCAB_SIZE = 1000

TEXT = (Path(__file__).parent / "english.txt").read_text(encoding="utf-8")  # a small English text to train on


def _words() -> list[str]:
    """Lower-case words of the built-in text, in first-seen order."""
    seen: dict[str, None] = {}
    for raw in TEXT.lower().split():
        word = "".join(c for c in raw if c.isalpha())
        if len(word) > 1:
            seen.setdefault(word, None)
    return list(seen)


def _subwords(words: list[str]) -> list[str]:
    """Common English continuation pieces plus the suffixes of the words that use them."""
    pieces = ["##s", "##es", "##ed", "##ing", "##er", "##ers", "##ly", "##ion", "##ions", "##al", "##ment",
              "##ness", "##ful", "##able", "##est", "##ity", "##ize", "##ized", "##ish", "##ous", "##ive"]
    stems = sorted({w[:-len(p) + 2] for w in words for p in pieces if w.endswith(p[2:]) and len(w) > len(p)})
    return pieces + stems


def _save(tokenizer, directory: Path, specials: dict[str, str], model_max_length: int, input_names: list[str]) -> None:
    """Save through ``PreTrainedTokenizerFast`` and make sure ``special_tokens_map.json`` exists."""
    from transformers import PreTrainedTokenizerFast

    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, model_max_length=model_max_length,
                                   model_input_names=input_names, **specials)
    fast.save_pretrained(str(directory))
    special_map = directory / "special_tokens_map.json"
    if not special_map.exists():
        special_map.write_text(json.dumps(specials, indent=2) + "\n", encoding="utf-8")


def wordpiece_tokenizer(directory, *, lowercase: bool = True, model_max_length: int = 512) -> int:
    """Write a tiny BERT WordPiece tokenizer (tokenizer.json, vocab.txt, configs) to ``directory``; return its size."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    chars = [chr(c) for c in range(33, 127)]
    if lowercase:
        chars = [c for c in chars if not c.isupper()]
    words = _words()
    vocab_list = list(dict.fromkeys(WORDPIECE_SPECIALS + chars + [f"##{c}" for c in chars] + words
                                    + _subwords(words)))
    vocab = {token: i for i, token in enumerate(vocab_list)}
    tokenizer = Tokenizer(models.WordPiece(vocab=vocab, unk_token="[UNK]", max_input_chars_per_word=100))
    tokenizer.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True,
                                                      strip_accents=None, lowercase=lowercase)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS]:0 $A:0 [SEP]:0", pair="[CLS]:0 $A:0 [SEP]:0 $B:1 [SEP]:1",
        special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])])
    tokenizer.decoder = decoders.WordPiece(prefix="##")
    (directory / "vocab.txt").write_text("\n".join(vocab_list) + "\n", encoding="utf-8")
    _save(tokenizer, directory, {"unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]",
                                 "cls_token": "[CLS]", "mask_token": "[MASK]"}, model_max_length,
          ["input_ids", "token_type_ids", "attention_mask"])
    return len(vocab_list)


def bpe_tokenizer(directory, *, model_max_length: int = 512) -> int:
    """Write a tiny RoBERTa-style byte-level BPE tokenizer, trained on a built-in text; return its size."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    tokenizer = Tokenizer(models.BPE(unk_token=None))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=BPE_VOCAB_SIZE, min_frequency=1, special_tokens=BPE_SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tokenizer.train_from_iterator(TEXT.splitlines(), trainer=trainer)
    tokenizer.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0),
                                                            trim_offsets=True, add_prefix_space=False)
    _save(tokenizer, directory, {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
                                 "sep_token": "</s>", "cls_token": "<s>", "pad_token": "<pad>",
                                 "mask_token": "<mask>"}, model_max_length, ["input_ids", "attention_mask"])
    return tokenizer.get_vocab_size()
