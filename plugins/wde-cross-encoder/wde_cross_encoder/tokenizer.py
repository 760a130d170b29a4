"""Pair tokenizer: the model's pair encoding (token types where the model has them); truncation cuts
the document, never the query."""

from __future__ import annotations

from wde_core.plugin_api import HFTokenizer, InputValueError, Request


class PairTokenizer(HFTokenizer):
    """Tokenizes ``(query, document)`` pairs with ``truncation="only_second"`` and single texts as usual."""

    def tokenize(self, requests: list[Request], *, truncate: bool | str = True) -> None:
        """Fill token ids; a query that leaves no room for its document is an error naming it."""
        singles = [r for r in requests if isinstance(r.text, str)]
        pairs = [r for r in requests if not isinstance(r.text, str)]
        if singles:
            super().tokenize(singles, truncate=truncate)
        if pairs:
            self.check_queries(pairs)
            self.tokenize_pairs(pairs, truncate)

    def check_queries(self, pairs: list[Request]) -> None:
        """Refuse a query whose tokens, with the special tokens of a pair, fill ``max_model_len``."""
        special = self.tokenizer.num_special_tokens_to_add(pair=True)
        queries = self.tokenizer([r.text[0] for r in pairs], add_special_tokens=False, verbose=False)["input_ids"]
        for request, ids in zip(pairs, queries):
            if len(ids) + special >= self.max_len:
                raise InputValueError(request.index, f"field 'query' has {len(ids)} tokens; with the pair's "
                                 f"{special} special tokens it leaves no room for the document within "
                                 f"max_model_len={self.max_len}; shorten the query")

    def tokenize_pairs(self, pairs: list[Request], truncate: bool) -> None:
        """Encode the pairs, cutting only documents when ``truncate``, else refusing over-long pairs."""
        encoded = self.tokenizer(
            [r.text[0] for r in pairs], [r.text[1] for r in pairs],
            truncation="only_second" if truncate is True else False,
            max_length=self.max_len if truncate is True else None,
            return_attention_mask=False, return_token_type_ids=self.uses_token_types, verbose=False,
        )
        for i, request in enumerate(pairs):
            request.token_ids = encoded["input_ids"][i]
            if self.uses_token_types:
                request.token_type_ids = encoded["token_type_ids"][i]
            if request.num_tokens > self.max_len:
                raise InputValueError(request.index, f"the (query, document) pair has {request.num_tokens} "
                                 f"tokens, more than max_model_len={self.max_len}; shorten the document or "
                                 "pass truncate=True")
