"""wde-llm-rerank: what every LLM yes/no reranker shares (its pair stages, answer rows and settings)."""
