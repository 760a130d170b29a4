"""Registers Gemma 3 text (``Gemma3TextModel``, EmbeddingGemma) for the core's embed workflow, and
bge-reranker-v2-gemma (``GemmaForCausalLM``) as an LLM reranker on wde-llm-rerank's pair stages."""

from __future__ import annotations

from dataclasses import replace

from wde_core.plugin_api import EMBED_WORKFLOW, ArchitectureLink, hookimpl

RERANK = "wde_gemma.bge_rerank"


@hookimpl
def wde_register_tokenizers(register):
    """Pairs in FlagLLMReranker's layout."""
    register("bge-gemma-rerank", f"{RERANK}:BgeGemmaRerankTokenizer", "pairs as FlagLLMReranker lays them out")


@hookimpl
def wde_register_workflows(register):
    """Pairs -> FlagLLMReranker's prompt -> sigmoid(logit Yes), with wde-llm-rerank's pair stages."""
    register(replace(EMBED_WORKFLOW, name="bge-gemma-rerank", input_processor="llm-pairs", tokenizer="bge-gemma-rerank",
                     output_processor="yes-no-score", engine_args="llm-rerank",
                     description="(query, passage) pairs -> FlagLLMReranker prompt -> sigmoid(logit Yes)"))


@hookimpl
def wde_register_architectures(register):
    """``Gemma3TextModel`` embeds (attention follows ``use_bidirectional_attention``); bge-reranker-v2-gemma reranks."""
    register(ArchitectureLink(
        architecture="Gemma3TextModel",
        task="embed",
        workflow="embed",
        model="wde_gemma.model:GemmaEmbedder",
        defaults={"pooling": "mean", "normalize": True},
        configure="wde_gemma.model:configure",
        description="Gemma 3 text (EmbeddingGemma): sliding-window and global layers, q/k norms, GeGLU, "
                    "bidirectional when the config says so",
    ))
    register(ArchitectureLink(
        architecture="GemmaForCausalLM", task="rerank", workflow="bge-gemma-rerank",
        model=f"{RERANK}:GemmaYesReranker",
        defaults={"pooling": "last", "normalize": False, "causal": True, "activation": "sigmoid"},
        variant="bge-reranker-v2-gemma", matches=f"{RERANK}:is_bge_gemma_reranker",
        configure=f"{RERANK}:configure_bge_gemma",
        description="bge-reranker-v2-gemma: an LLM Yes reranker (FlagLLMReranker's prompt)",
    ))
