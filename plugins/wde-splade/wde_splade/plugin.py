"""Registers the splade variant of ``BertForMaskedLM`` (sentence-transformers ``SparseEncoder`` directories: MLM +
``SpladePooling``, or a Router with ``SparseStaticEmbedding`` query sides), its workflow and its stages."""

from __future__ import annotations

from dataclasses import replace

from wde_core.plugin_api import EMBED_WORKFLOW, ArchitectureLink, hookimpl

_S = "wde_splade.stages"


@hookimpl
def wde_register_architectures(register):
    """``BertForMaskedLM`` with SPLADE's modules.json: the splade variant (DistilBERT is not in wde)."""
    register(ArchitectureLink(
        architecture="BertForMaskedLM", task="embed", workflow="splade", model="wde_splade.model:SpladeModel",
        defaults={"pooling": "cls", "normalize": False}, variant="splade",
        matches="wde_splade.files:is_sparse_encoder", configure="wde_splade.files:configure",
        description="SPLADE / inference-free sparse encoder: {token_id: weight} vectors (output='sparse')",
    ))


@hookimpl
def wde_register_workflows(register):
    """The embed workflow with the sparse encoder's routed stages and output processor."""
    register(replace(EMBED_WORKFLOW, name="splade", input_processor="splade-routes", tokenizer="splade-routes",
                     model_input_builder="splade-routes", output_processor="sparse", engine_args="splade",
                     description="texts -> learned sparse vectors (output='sparse'; 'dense': vocabulary-sized)"))


@hookimpl
def wde_register_input_processors(register):
    """Texts, each request's Router route from ``prompt_name``."""
    register("splade-routes", f"{_S}:RoutedInputProcessor", "str or list of str; prompt_name picks a Router route")


@hookimpl
def wde_register_tokenizers(register):
    """The MLM's tokenizer, or a static route's (no special tokens)."""
    register("splade-routes", f"{_S}:RoutedTokenizer", "the MLM's fast tokenizer; static routes' own")


@hookimpl
def wde_register_model_input_builders(register):
    """The flat batch plus each sequence's route."""
    register("splade-routes", f"{_S}:RoutedBatchBuilder", "packed batch with each sequence's Router route")


@hookimpl
def wde_register_output_processors(register):
    """``{token_id: weight}`` and the vocabulary-sized dense vector, ``max_active_dims`` applied."""
    register("sparse", "wde_splade.output:SparseOutputProcessor", "sparse {token_id: weight} and dense outputs")


@hookimpl
def wde_register_engine_args(register):
    """The core's arguments plus ``max_active_dims``."""
    register("splade", f"{_S}:SpladeEngineArgs", "the core's arguments plus max_active_dims (top-k weights kept)")
