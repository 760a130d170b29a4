"""Dequantize a GGUF checkpoint (llama, qwen2, gemma3, ...) into a plain HF directory: config.json,
model.safetensors and the tokenizer files, as transformers' own GGUF reader gives them.

usage: python gguf_to_hf.py DIR GGUF_NAME OUTDIR [float32|bfloat16|float16] [--body]

The model loaded from the GGUF is saved as it is, once its GGUF quantizer is detached: the same tensors as
../shared/tools/gguf_to_hf.py writes (which builds a second, randomly initialised model and copies the weights
over, and reads the file's metadata a third time), in about half its time. transformers parses the file's metadata
three times (the tokenizer's config, the model's config, the weights), each a fresh ``gguf.GGUFReader`` walking
the vocabulary and merges string by string through numpy's memmap subclass (~8 s for Qwen2.5's 151k tokens):
here the three share one reader over a plain array view of the same map (~2 s). ``--body`` saves the causal LM's
base model (``Gemma3TextModel`` for gemma-3) instead of the whole LM.
"""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager

import numpy as np
import torch
from gguf import GGUFReader
from transformers import AutoModelForCausalLM, AutoTokenizer


class ArrayReader(GGUFReader):
    """A ``GGUFReader`` whose file map is a plain ``ndarray`` view: the same bytes, without the memmap subclass's
    per-slice overhead on the metadata's hundreds of thousands of small reads."""

    @property
    def data(self) -> np.ndarray:
        """The file's bytes (a view of its memory map)."""
        return self._data

    @data.setter
    def data(self, mapped: np.memmap) -> None:
        self._data = mapped.view(np.ndarray)


@contextmanager
def one_reader(path: str):
    """Within the block, every ``gguf.GGUFReader(path)`` transformers makes is one shared ``ArrayReader``."""
    import gguf

    reader = ArrayReader(path)

    def shared(file, mode="r"):
        return reader if mode == "r" and os.path.samefile(file, path) else GGUFReader(file, mode)

    gguf.GGUFReader = shared
    try:
        yield reader
    finally:
        gguf.GGUFReader = GGUFReader


def convert(directory: str, gguf_name: str, out: str, dtype: torch.dtype = torch.float32, body: bool = False) -> None:
    """Write ``directory/gguf_name`` dequantized to ``dtype`` as an HF directory ``out`` (its base model alone when
    ``body``)."""
    with one_reader(os.path.join(directory, gguf_name)):
        tokenizer = AutoTokenizer.from_pretrained(directory, gguf_file=gguf_name)
        model = AutoModelForCausalLM.from_pretrained(directory, gguf_file=gguf_name, dtype=dtype)
    model.hf_quantizer = None  # the weights are dequantized in memory: nothing of GGUF is left to save
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    if body:
        model = model.base_model
        model.hf_quantizer = None
        model.config.architectures = [type(model).__name__]
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)


if __name__ == "__main__":
    flags = {arg for arg in sys.argv[1:] if arg.startswith("--")}
    source, name, target, *rest = [arg for arg in sys.argv[1:] if not arg.startswith("--")]
    convert(source, name, target, getattr(torch, rest[0] if rest else "float32"), body="--body" in flags)
