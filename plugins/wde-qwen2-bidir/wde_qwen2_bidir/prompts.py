"""Qwen3 prompt formats: the embedder's instruction prefix and the reranker's chat template."""

from __future__ import annotations

QWEN3_EMBED_TASK = "Given a web search query, retrieve relevant passages that answer the query"
QWEN3_RERANK_TASK = "Given a web search query, retrieve relevant passages that answer the query"
# As Qwen3-Reranker's model card formats a pair: a system/user turn, then the assistant's empty think block.
RERANK_PREFIX = ("<|im_start|>system\nJudge whether the Document meets the requirements based on the Query "
                 "and the Instruct provided. Note that the answer can only be \"yes\" or \"no\".<|im_end|>\n"
                 "<|im_start|>user\n")
RERANK_SUFFIX = "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"


def qwen3_query_prompt(task: str = QWEN3_EMBED_TASK) -> str:
    """The Qwen3-Embedding query prefix, ``"Instruct: {task}\\nQuery:"`` (documents take none)."""
    return f"Instruct: {task}\nQuery:"


def qwen3_rerank_body(query: str, document: str, instruction: str | None = None) -> str:
    """The middle of Qwen3-Reranker's prompt, ``<Instruct>: ...\n<Query>: ...\n<Document>: ...``."""
    instruction = QWEN3_RERANK_TASK if instruction is None else instruction
    return f"<Instruct>: {instruction}\n<Query>: {query}\n<Document>: {document}"


def qwen3_rerank_text(query: str, document: str, instruction: str | None = None) -> str:
    """One (query, document) pair in Qwen3-Reranker's whole prompt, ending where the model says yes or no."""
    return RERANK_PREFIX + qwen3_rerank_body(query, document, instruction) + RERANK_SUFFIX

# mxbai-rerank-v2 (Qwen2ForCausalLM), as the mxbai-rerank package (MxbaiRerankV2) lays out a pair:
# prefix + "query: q" + sep + "document: d" + sep + task + suffix, each part tokenized on its own
MXBAI_SEP = "\n"
MXBAI_INSTRUCTION = "instruction: {instruction}"
MXBAI_QUERY = "query: {query}"
MXBAI_DOCUMENT = "document: {document}"
MXBAI_TASK = ("You are a search relevance expert who evaluates how well documents match search queries. For each "
              "query-document pair, carefully analyze the semantic relationship between them, then provide your "
              "binary relevance judgment (0 for not relevant, 1 for relevant).\nRelevance:")
MXBAI_PREFIX = ("<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
                "<|im_start|>user\n")
MXBAI_SUFFIX = "<|im_end|>\n<|im_start|>assistant\n"
