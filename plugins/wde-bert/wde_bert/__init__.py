"""wde plugin for BERT-family encoders (``BertModel`` and its pretraining/MLM checkpoints)."""

__version__ = "0.1.0"
