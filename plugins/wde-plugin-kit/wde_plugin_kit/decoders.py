"""Random-weight decoder directories for tests (Qwen2, Llama, Mistral; Qwen3-style yes/no rerankers) and the tiny
byte-level BPE they share, trained on the shared Wikipedia paragraphs (the same every run)."""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

from wde_plugin_kit.corpus import wiki_paragraphs

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
def decoder_bpe_json() -> str:
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

    tokenizer = PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(decoder_bpe_json()), eos_token=EOS,
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
