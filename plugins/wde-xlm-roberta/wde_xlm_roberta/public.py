"""wde-xlm-roberta's public API for other plugins: the XLM-RoBERTa encoder (BERT's layers under RoBERTa's names)."""

from wde_xlm_roberta.model import XLMRobertaEncoder

__all__ = ["XLMRobertaEncoder"]
