"""The ``configure`` steps of DeBERTa models: the cross-encoders' score activation, and how attention runs."""

from __future__ import annotations

from wde_cross_encoder.public import choose_activation


def configure(propose, directory, args) -> None:
    """Choose the activation as every cross-encoder does (wde-cross-encoder), and note under ``attention`` how attention is computed."""
    choose_activation(propose, directory, args)
    note_attention(propose, directory, args)


def note_attention(propose, directory, args) -> None:
    """Note under ``attention`` how attention is computed (the token classifier's ``configure`` step)."""
    propose.notes["attention"] = describe_attention(directory.config)


def describe_attention(config) -> str:
    """Why the engine's attention backend is, or is not, used for this config."""
    from wde_deberta.model import check_config, uses_relative_attention
    from wde_deberta.relative import RelativeSpec

    check_config(config)
    if not uses_relative_attention(config):
        return "no relative-position terms (relative_attention off or no pos_att_type): the attention backend"
    spec = RelativeSpec.from_config(config)
    shared = "keys shared with content (share_att_key)" if getattr(config, "share_att_key", False) \
        else "own position projections"
    absolute = "plus absolute positions" if getattr(config, "position_biased_input", True) else "no absolute positions"
    return (f"disentangled ({spec.describe()}; {shared}; {absolute}): computed by the model in padded blocks "
            "of similar-length sequences, one SDPA call per block and layer with the relative terms as a "
            "per-pair bias; the attention backend is not used")
