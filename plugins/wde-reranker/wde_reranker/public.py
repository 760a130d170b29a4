"""wde-reranker's public API for other plugins' cross-encoders: the matchers of the rerank and classify
variants (``has_one_label``, ``has_several_labels``) and the score activation (``choose_activation``, a
``configure`` step). Torch-free: plugins name these in ``"wde_reranker.public:NAME"`` strings."""

from wde_reranker.settings import choose_activation, has_one_label, has_several_labels

__all__ = ["choose_activation", "has_one_label", "has_several_labels"]
