"""wde plugin: Gemma 3 text models as embedders (EmbeddingGemma)."""
