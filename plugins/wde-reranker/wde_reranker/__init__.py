"""wde plugin for the BERT-family cross-encoders (BERT, ELECTRA): rerank (one relevance logit) and classify
(several labels) on wde-cross-encoder's workflows."""

__version__ = "0.1.0"
