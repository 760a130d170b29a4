"""Settings of the Qwen2-VL models: causal attention and the decoder's position limit; ColQwen2 normalizes every
token's vector itself, the single-vector embedders pool the last token and are normalized."""

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


def configure_embedder(propose, directory, args) -> None:
    """Causal attention, the last token pooled and normalized (GME's, DSE's), ``max_model_len`` within the decoder's
    positions."""
    from wde_core.plugin_api import rope_type

    text = directory.config.text_config
    rope_type(text)
    propose.require("causal", True, "Qwen2-VL's decoder is a causal language model")
    propose.suggest("pooling", "last", "Qwen2-VL embedders (GME, DSE) pool the last token")
    propose.suggest("normalize", True, "Qwen2-VL embedders (GME, DSE) are compared by cosine")
    propose.length_limit = (text.max_position_embeddings, "Qwen2-VL's text max_position_embeddings")
