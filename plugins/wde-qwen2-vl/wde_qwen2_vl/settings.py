"""ColQwen2's settings: causal attention and the decoder's position limit."""

from __future__ import annotations


def configure(propose, directory, args) -> None:
    """Causal attention (a Qwen2 decoder), no normalization of a pooled vector (it has none: every token's vector is
    normalized by the model), and ``max_model_len`` within the decoder's positions."""
    from wde_core.plugin_api import rope_type

    text = directory.config.vlm_config.text_config
    rope_type(text)  # refuse a RoPE wde does not implement before anything loads
    propose.require("causal", True, "ColQwen2's decoder is Qwen2-VL's causal language model")
    propose.require("normalize", False, "each token's vector is normalized by the model itself")
    propose.length_limit = (text.max_position_embeddings, "Qwen2-VL's text max_position_embeddings")
