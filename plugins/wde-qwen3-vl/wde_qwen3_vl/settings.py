"""Settings of Qwen3-VL embedders: causal attention, the last token pooled and normalized, ``max_model_len`` within
the decoder's positions, and each input framed by the model's chat template where the directory has one."""

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
    propose_framing(propose, directory, args)


def propose_framing(propose, directory, args) -> None:
    """``chat`` where the directory has a chat template (Qwen3-VL-Embedding's scripts put each input in a chat turn
    under a system instruction and pool the assistant header's last token), else ``plain``; the engine argument
    ``framing`` still wins."""
    from wde_vision_language.public import find_chat_template

    has_template = find_chat_template(directory.path) is not None
    propose.extras["framing"] = "chat" if has_template else "plain"
    asked = getattr(args, "framing", None)
    propose.notes["framing"] = (f"{asked}: engine argument framing" if asked else
                                "chat by default: the directory's chat template, as Qwen3-VL-Embedding frames its "
                                "inputs" if has_template else "plain by default: the directory has no chat template")

