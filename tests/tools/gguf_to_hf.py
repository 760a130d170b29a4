"""Dequantize a GGUF checkpoint (llama, qwen2, gemma3, ...) into a plain HF directory: config.json,
model.safetensors and the tokenizer files, as transformers' own GGUF reader gives them.

usage: python gguf_to_hf.py DIR GGUF_NAME OUTDIR [float32|bfloat16|float16]

The model loaded from the GGUF is saved as it is, once its GGUF quantizer is detached: the same tensors as
../shared/tools/gguf_to_hf.py writes (which builds a second, randomly initialised model and copies the weights
over, and reads the file's metadata a third time), in about half its time: CI's slow tier runs it four times.
"""

import sys

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer


def convert(directory: str, gguf_name: str, out: str, dtype: torch.dtype = torch.float32) -> None:
    """Write ``directory/gguf_name`` dequantized to ``dtype`` as an HF directory ``out``."""
    tokenizer = AutoTokenizer.from_pretrained(directory, gguf_file=gguf_name)
    model = AutoModelForCausalLM.from_pretrained(directory, gguf_file=gguf_name, dtype=dtype)
    model.hf_quantizer = None  # the weights are dequantized in memory: nothing of GGUF is left to save
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)


if __name__ == "__main__":
    source, name, target = sys.argv[1:4]
    convert(source, name, target, getattr(torch, sys.argv[4] if len(sys.argv) > 4 else "float32"))
