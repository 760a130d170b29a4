"""Tokenizer stage: the model directory's fast tokenizer with an explicit truncation policy."""

from __future__ import annotations

from wde_core.request import Request


class HFTokenizer:
    """Tokenizes with the model's fast tokenizer; truncates to ``max_model_len`` or refuses."""

    def __init__(self, pipeline) -> None:
        self.tokenizer = pipeline.hf_tokenizer()
        if not self.tokenizer.is_fast:
            raise ValueError(f"model {pipeline.model.name!r}: wde needs a fast tokenizer (tokenizer.json)")
        self.max_len = pipeline.settings.max_model_len
        self.include_prompt = pipeline.settings.include_prompt
        self.uses_token_types = getattr(pipeline.model.config, "type_vocab_size", 0) > 1

    def tokenize(self, requests: list[Request], *, truncate: bool = True) -> None:
        """Fill each request's token ids; with ``truncate=False`` an over-long input is an error."""
        encoded = self.tokenizer(
            [r.text for r in requests],
            add_special_tokens=True,
            truncation=truncate,
            max_length=self.max_len if truncate else None,
            return_attention_mask=False,
            return_token_type_ids=self.uses_token_types,
            verbose=False,
        )
        for i, request in enumerate(requests):
            request.token_ids = encoded["input_ids"][i]
            if self.uses_token_types:
                request.token_type_ids = encoded["token_type_ids"][i]
        if not truncate:
            self.check_lengths(requests)
        if not self.include_prompt:
            self.set_prompt_lengths(requests)

    def check_lengths(self, requests: list[Request]) -> None:
        """Raise naming the first input longer than ``max_model_len``."""
        for request in requests:
            if request.num_tokens > self.max_len:
                raise ValueError(
                    f"input {request.index}: field 'text' has {request.num_tokens} tokens, more than "
                    f"max_model_len={self.max_len}; shorten it or pass truncate=True"
                )

    def set_prompt_lengths(self, requests: list[Request]) -> None:
        """Record how many leading tokens belong to the prompt (excluded from pooling).

        As sentence-transformers counts it: the prompt's own token count, less a trailing special
        token (``[SEP]``, ``</s>``, EOS) the tokenizer adds.
        """
        lengths: dict[str, int] = {}
        special = set(self.tokenizer.all_special_ids)
        for request in requests:
            if request.prompt:
                if request.prompt not in lengths:
                    ids = self.tokenizer(request.prompt, add_special_tokens=True)["input_ids"]
                    lengths[request.prompt] = len(ids) - (1 if ids and ids[-1] in special else 0)
                request.prompt_len = min(lengths[request.prompt], request.num_tokens - 1)
