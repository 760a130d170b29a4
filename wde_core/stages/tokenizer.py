"""Tokenizer stage: the model directory's fast tokenizer with an explicit truncation policy."""

from __future__ import annotations

from wde_core.stages.request import InputValueError, Request


class HFTokenizer:
    """Tokenizes with the model's fast tokenizer; truncates to ``max_model_len`` or refuses."""

    def __init__(self, pipeline) -> None:
        self.tokenizer = pipeline.hf_tokenizer()
        if not self.tokenizer.is_fast:
            raise ValueError(f"model {pipeline.model.name!r}: wde needs a fast tokenizer (tokenizer.json)")
        self.max_len = pipeline.settings.max_model_len
        self.include_prompt = pipeline.settings.include_prompt
        self.uses_token_types = getattr(pipeline.model.config, "type_vocab_size", 0) > 1
        self._affixes: tuple[list[int], list[int]] | None = None

    def tokenize(self, requests: list[Request], *, truncate: bool | str = True) -> None:
        """Fill each request's token ids. ``truncate``: ``True`` cuts to ``max_model_len``, ``False`` makes
        an over-long input an error, ``"chunk"`` leaves it whole (the task then splits it with :meth:`chunk`)."""
        encodings = self.encode_texts([r.text for r in requests], self.max_len if truncate is True else None)
        for request, encoding in zip(requests, encodings):
            request.token_ids = encoding.ids
            if self.uses_token_types and encoding.n_sequences > 1:  # a pair; one text's types are all 0 (None)
                request.token_type_ids = encoding.type_ids
        if truncate is False:
            self.check_lengths(requests)
        if not self.include_prompt:
            self.set_prompt_lengths(requests)

    def encode_texts(self, texts: list[str], max_length: int | None) -> list:
        """The Rust tokenizer's encodings of ``texts``, special tokens added, cut to ``max_length`` tokens on the
        tokenizer's ``truncation_side`` when given: the ids ``tokenizer(texts, truncation=...)`` gives, without its
        per-text conversion into Python dicts (a tenth of the time of 50-token texts)."""
        backend = self.tokenizer.backend_tokenizer
        side = self.tokenizer.truncation_side
        current = backend.truncation or {}
        if max_length is None and current:
            backend.no_truncation()
        elif max_length is not None and (current.get("max_length"), current.get("stride"), current.get("strategy"),
                                         current.get("direction")) != (max_length, 0, "longest_first", side):
            backend.enable_truncation(max_length, stride=0, strategy="longest_first", direction=side)
        if backend.padding is not None:
            backend.no_padding()
        return backend.encode_batch(texts, add_special_tokens=True)

    def chunk(self, request: Request, max_len: int) -> list[list[int]]:
        """Split an over-long request's token ids into pieces of at most ``max_len`` tokens, each wrapped
        in the special tokens this tokenizer puts around a text (override for another scheme)."""
        prefix, suffix = self.special_affixes()
        body = request.token_ids[len(prefix):len(request.token_ids) - len(suffix)]
        size = max_len - len(prefix) - len(suffix)
        if size < 1:
            raise ValueError(f"max_model_len={max_len} leaves no room for text between the special tokens")
        return [prefix + body[start:start + size] + suffix for start in range(0, len(body), size)]

    def special_affixes(self) -> tuple[list[int], list[int]]:
        """The special token ids this tokenizer stage puts before and after a text's own tokens."""
        if self._affixes is None:
            probe = Request(0, "hello")
            self.tokenize([probe], truncate="chunk")
            plain = self.tokenizer("hello", add_special_tokens=False)["input_ids"]
            ids = probe.token_ids
            start = next((i for i in range(len(ids)) if ids[i:i + len(plain)] == plain), None)
            if start is None:
                raise ValueError("cannot tell this tokenizer's special tokens apart from the text's own")
            self._affixes = (ids[:start], ids[start + len(plain):])
        return self._affixes

    def check_lengths(self, requests: list[Request]) -> None:
        """Raise naming the first input longer than ``max_model_len``."""
        for request in requests:
            if request.num_tokens > self.max_len:
                raise InputValueError(request.index, f"field 'text' has {request.num_tokens} tokens, more than "
                                 f"max_model_len={self.max_len}; shorten it or pass truncate=True")

    def set_prompt_lengths(self, requests: list[Request]) -> None:
        """Record how many leading tokens belong to the prompt (excluded from pooling)."""
        lengths: dict[str, int] = {}
        for request in requests:
            if request.prompt:
                if request.prompt not in lengths:
                    lengths[request.prompt] = prompt_token_count(self.tokenizer, request.prompt)
                request.prompt_len = min(lengths[request.prompt], request.num_tokens - 1)


def prompt_token_count(tokenizer, prompt: str) -> int:
    """The prompt's tokens as sentence-transformers counts them: less a trailing special token the tokenizer adds."""
    ids = tokenizer(prompt, add_special_tokens=True)["input_ids"]
    return len(ids) - (1 if ids and ids[-1] in set(tokenizer.all_special_ids) else 0)
