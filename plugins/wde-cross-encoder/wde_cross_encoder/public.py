"""wde-cross-encoder's public API for the model families' cross-encoders: ``cross_encoder_links`` (the
``single-logit`` rerank and ``several-labels`` classify links of an architecture), the matchers of those
variants (``has_one_label``, ``has_several_labels``) and the score activation (``choose_activation``, a
``configure`` step a family's own step may call). Torch-free: plugins also name these in
``"wde_cross_encoder.public:NAME"`` strings."""

from wde_cross_encoder.links import CHOOSE_ACTIVATION, VARIANTS, cross_encoder_links
from wde_cross_encoder.settings import choose_activation, has_one_label, has_several_labels

__all__ = ["CHOOSE_ACTIVATION", "VARIANTS", "choose_activation", "cross_encoder_links", "has_one_label",
           "has_several_labels"]
