"""wde plugin for MPNet encoders (``MPNetModel`` and its MLM checkpoints)."""

__version__ = "0.1.0"
