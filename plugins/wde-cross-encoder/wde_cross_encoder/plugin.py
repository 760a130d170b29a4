"""Registers the cross-encoders' workflows: ``rerank`` (one relevance score per pair) and ``classify`` (label
probabilities per text or pair), with the pair input processor, the pair tokenizer and the score and label
output processors. No architecture: model families link theirs with ``wde_cross_encoder.public``."""

from __future__ import annotations

from dataclasses import replace

from wde_core.plugin_api import EMBED_WORKFLOW, hookimpl

_P = "wde_cross_encoder"


@hookimpl
def wde_register_input_processors(register):
    """(query, document) pairs for rerank; texts or pairs for classify."""
    register("cross-encoder", f"{_P}.inputs:CrossEncoderInputProcessor", "(query, document) pairs, or texts")


@hookimpl
def wde_register_tokenizers(register):
    """The pair tokenizer: truncation cuts the document, never the query."""
    register("hf-pair", f"{_P}.tokenizer:PairTokenizer", "pair encoding with token types; cuts documents only")


@hookimpl
def wde_register_output_processors(register):
    """Scores for rerank, label probabilities for classify."""
    register("score", f"{_P}.outputs:ScoreOutputProcessor", "one relevance score per pair")
    register("labels", f"{_P}.outputs:LabelOutputProcessor", "label -> probability per input")


@hookimpl
def wde_register_workflows(register):
    """``rerank`` and ``classify``: the core's scheduler, builder, executor and worker."""
    for name, output, what in (("rerank", "score", "(query, document) pairs -> relevance scores"),
                               ("classify", "labels", "texts or pairs -> label probabilities")):
        register(replace(EMBED_WORKFLOW, name=name, input_processor="cross-encoder", tokenizer="hf-pair",
                         output_processor=output, description=what))
