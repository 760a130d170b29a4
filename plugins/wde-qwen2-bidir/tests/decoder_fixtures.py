"""wde-qwen2-bidir's decoder tests: HF reference states (causal, or bidirectional via a 4D mask) and wde's for
random token sequences; the random Qwen2, Llama and Mistral directories and their tiny BPE come from
wde_plugin_kit.decoders."""

from __future__ import annotations

from pathlib import Path

import torch

from wde_plugin_kit.decoders import (DECODER_CONFIGS as CONFIGS, DECODER_VOCAB as VOCAB,  # noqa: F401 - re-exported
                                     EOS, PAD)
from wde_plugin_kit.decoders import save_random_decoder, write_decoder_tokenizer  # noqa: F401 - re-exported
from wde_core.plugin_api import Request


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
