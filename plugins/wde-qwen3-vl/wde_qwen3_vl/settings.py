"""Settings of Qwen3-VL embedders: causal attention, the last token pooled and normalized, ``max_model_len`` within
the decoder's positions."""

from __future__ import annotations


def configure(propose, directory, args) -> None:
    """Causal attention (a Qwen3 decoder), last-token pooling and normalization (Qwen3-VL-Embedding's), and
    ``max_model_len`` within the text config's ``max_position_embeddings``."""
    from wde_core.plugin_api import rope_type

    text = directory.config.text_config
    rope_type(text)  # refuse a RoPE wde does not implement before anything loads
    propose.require("causal", True, "Qwen3-VL's decoder is a causal language model")
    propose.suggest("pooling", "last", "Qwen3-VL embedders (Qwen3-VL-Embedding) pool the last token")
    propose.suggest("normalize", True, "Qwen3-VL embedders (Qwen3-VL-Embedding) are compared by cosine")
    propose.length_limit = (text.max_position_embeddings, "Qwen3-VL's text max_position_embeddings")
