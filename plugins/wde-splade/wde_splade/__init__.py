"""wde plugin for learned sparse encoders: SPLADE (MLM head + SpladePooling) and inference-free Router models."""

__version__ = "0.1.0"
