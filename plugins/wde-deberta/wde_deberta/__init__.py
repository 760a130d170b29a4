"""wde plugin for DeBERTa-v2/v3 cross-encoders: rerank (one relevance logit) and classify (several labels)."""

__version__ = "0.1.0"
