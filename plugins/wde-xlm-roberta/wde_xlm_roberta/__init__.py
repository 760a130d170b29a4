"""wde plugin for XLM-RoBERTa encoders: multilingual embedders and bge-m3's three outputs."""

__version__ = "0.1.0"
