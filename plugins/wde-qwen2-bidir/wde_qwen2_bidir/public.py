"""wde-qwen2-bidir's public API for other plugins: ``DecoderEmbedder`` (the Qwen2/Qwen3/Llama/Mistral decoder;
``decode`` runs it from input embeddings). What LLM rerankers share (answer rows, pair stages) is wde-llm-rerank's
(``wde_llm_rerank.public``). Imports torch: the plugin's entry point does not import this module."""

from wde_qwen2_bidir.model import DecoderEmbedder

__all__ = ["DecoderEmbedder"]
