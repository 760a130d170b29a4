"""Random-weight Qwen2, Llama and Mistral directories for the decoder tests, a tiny byte-level BPE
tokenizer for them, and token states from wde and from HF (causal, or bidirectional via a 4D mask)."""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

import torch

from conftest import wiki_paragraphs
from wde_core.runtime.request import Request

VOCAB = 512
EOS, PAD = "<|endoftext|>", "<|pad|>"
# family -> (config class, class saved, config) -- GQA everywhere, each family's own quirks on top
CONFIGS = {
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
    """A byte-level BPE of ``VOCAB`` tokens trained on real paragraphs (the same every run)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=[EOS, PAD],
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
    import transformers

    config_name, default_class, config = CONFIGS[family]
    config = {**config, "vocab_size": VOCAB, "num_hidden_layers": num_hidden_layers,
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


def load_reference(directory: Path):
    """The HF base model (no LM head) from ``directory``, eager attention, fp32."""
    from transformers import AutoModel

    return AutoModel.from_pretrained(directory, attn_implementation="eager", dtype=torch.float32).eval()


def bidirectional_mask(length: int) -> torch.Tensor:
    """A 4D additive mask ``[1, 1, L, L]`` of zeros: every token sees every token."""
    return torch.zeros(1, 1, length, length)


def hf_states(reference, token_ids: list[int], *, bidirectional: bool) -> torch.Tensor:
    """HF last hidden states ``[L, H]`` of one sequence: the model as is (causal), or bidirectional
    through an explicit non-causal 4D attention mask."""
    ids = torch.tensor([token_ids])
    mask = bidirectional_mask(len(token_ids)) if bidirectional else None
    with torch.no_grad():
        return reference(input_ids=ids, attention_mask=mask).last_hidden_state[0]


def requests_of(token_lists: list[list[int]]) -> list[Request]:
    """Requests carrying the given token ids."""
    return [Request(index=i, text="", token_ids=list(ids)) for i, ids in enumerate(token_lists)]


def random_token_lists(lengths: list[int], seed: int = 0) -> list[list[int]]:
    """Random token ids of the given lengths."""
    gen = torch.Generator().manual_seed(seed)
    return [torch.randint(0, VOCAB, (n,), generator=gen).tolist() for n in lengths]


def wde_states(engine, token_lists: list[list[int]]) -> list[torch.Tensor]:
    """wde's token states for the sequences, packed into one batch by the engine's builder."""
    model_input = engine.builder.build(requests_of(token_lists))
    with torch.inference_mode():
        hidden = engine.executor.worker.model(model_input)
    return list(torch.split(hidden, model_input.seq_lens))
