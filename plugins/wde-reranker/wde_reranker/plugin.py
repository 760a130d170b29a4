"""Registers cross-encoders: ``*ForSequenceClassification`` with one label rerank, with several classify."""

from __future__ import annotations

from dataclasses import replace

from wde_core.plugin_api import EMBED_WORKFLOW, ArchitectureLink, hookimpl

_P = "wde_reranker"
MODELS = {
    "BertForSequenceClassification": (f"{_P}.models:BertCrossEncoder", {}),
    "XLMRobertaForSequenceClassification": (f"{_P}.models:XLMRobertaCrossEncoder", {"position_offset": 2}),
    "ElectraForSequenceClassification": (f"{_P}.electra:ElectraCrossEncoder", {}),
}
VARIANTS = (  # task, variant, matcher, workflow
    ("rerank", "single-logit", f"{_P}.settings:has_one_label", "rerank"),
    ("classify", "several-labels", f"{_P}.settings:has_several_labels", "classify"),
)


@hookimpl
def wde_register_architectures(register):
    """Each architecture reranks with ``num_labels == 1`` and classifies with more labels; ``ElectraModel`` embeds."""
    for architecture, (model, defaults) in MODELS.items():
        for task, variant, matches, workflow in VARIANTS:
            register(ArchitectureLink(
                architecture=architecture, task=task, workflow=workflow, model=model,
                defaults={"pooling": "cls", "normalize": False, **defaults}, variant=variant, matches=matches,
                configure=f"{_P}.settings:choose_activation",
                description=f"cross-encoder ({variant}): {task}",
            ))
    register(ArchitectureLink(
        architecture="ElectraModel", task="embed", workflow="embed", model=f"{_P}.electra:ElectraEncoder",
        defaults={"pooling": "cls", "normalize": False},
        description="ELECTRA encoder (the cross-encoders' backbone) as an embedder: BERT layers, projected embeddings",
    ))


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
