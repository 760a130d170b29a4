"""wde plugin: ModernBERT (alternating global and sliding-window attention, GeGLU, RoPE) embedders and rerankers."""
