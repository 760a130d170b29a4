"""``configure`` steps: say how attention runs (global and local layers, RoPE thetas); for the cross-encoder,
pool as ``classifier_pooling`` says and pick the score activation as wde-cross-encoder does."""

from __future__ import annotations

from wde_cross_encoder.public import choose_activation

_POOLINGS = ("cls", "mean")


def describe_attention(config) -> str:
    """Which layers attend globally and which within the local window, and each kind's RoPE theta."""
    from wde_modernbert.model import GLOBAL, LOCAL, layer_types, local_window, rope_config

    kinds = layer_types(config)
    where = ", ".join(str(i) for i, kind in enumerate(kinds) if kind == GLOBAL) or "none"
    theta = {kind: rope_config(config, kind).rope_parameters["rope_theta"] for kind in (GLOBAL, LOCAL)}
    return (f"global attention in layers {where} of {len(kinds)} (RoPE theta {theta[GLOBAL]:g}); the others "
            f"attend within {local_window(config)} tokens either side (local_attention={config.local_attention}, "
            f"RoPE theta {theta[LOCAL]:g}), through the attention backend's window")


def configure_embed(propose, directory, args) -> None:
    """Note how attention runs."""
    propose.notes["attention"] = describe_attention(directory.config)


def configure_cross_encoder(propose, directory, args) -> None:
    """Suggest pooling as the classification head does (``classifier_pooling``; the engine argument still wins),
    the score activation as every cross-encoder (wde-cross-encoder's ``choose_activation``), and note how attention runs."""
    pooling = getattr(directory.config, "classifier_pooling", "cls")
    if pooling not in _POOLINGS:
        raise ValueError(f"ModernBERT: classifier_pooling={pooling!r} is not supported (only cls, mean)")
    propose.suggest("pooling", pooling,
                    f"config.json classifier_pooling ({pooling}), as ModernBertForSequenceClassification")
    choose_activation(propose, directory, args)
    configure_embed(propose, directory, args)
