"""Which task a sequence-classification checkpoint serves, and the activation of its scores."""

from __future__ import annotations

# sentence-transformers' CrossEncoder stores its activation in config.json as a torch class path
_ST_ACTIVATIONS = {"Sigmoid": "sigmoid", "Identity": "identity", "Tanh": "tanh", "Softmax": "softmax"}


def num_labels(directory) -> int:
    """``num_labels`` of the model's config (HF derives it from ``id2label``)."""
    return int(getattr(directory.config, "num_labels", 2))


def has_one_label(directory) -> str | None:
    """Matcher of the rerank variant."""
    return "num_labels == 1: a relevance score" if num_labels(directory) == 1 else None


def has_several_labels(directory) -> str | None:
    """Matcher of the classify variant."""
    n = num_labels(directory)
    return f"num_labels == {n}: a classifier" if n > 1 else None


def choose_activation(propose, directory, args) -> None:
    """Scores: the activation sentence-transformers' config names, else sigmoid for one label;
    labels: softmax, or sigmoid for multi-label models."""
    config = directory.config
    st_path = (getattr(config, "sentence_transformers", None) or {}).get("activation_fn") \
        or getattr(config, "sbert_ce_default_activation_function", None)
    if num_labels(directory) > 1:
        multi = getattr(config, "problem_type", None) == "multi_label_classification"
        propose.suggest("activation", "sigmoid" if multi else "softmax",
                        "multi-label classifier: sigmoid per label" if multi else "softmax over labels")
    elif st_path:
        name = str(st_path).rsplit(".", 1)[-1]
        if name not in _ST_ACTIVATIONS:
            raise ValueError(f"model {directory.name!r}: unsupported score activation {st_path!r} in config.json; "
                             f"supported: {', '.join(sorted(_ST_ACTIVATIONS))}")
        propose.suggest("activation", _ST_ACTIVATIONS[name],
                        f"config.json sentence_transformers activation_fn {st_path}")
    else:
        propose.suggest("activation", "sigmoid",
                        "single logit: sigmoid (as sentence-transformers' CrossEncoder and TEI)")
