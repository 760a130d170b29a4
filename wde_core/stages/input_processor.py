"""Input processor of the embed task: validates texts and options, applies prompts."""

from __future__ import annotations

from typing import Any, Sequence

from wde_core.stages.request import EmbedOptions, InputTypeError, Request, as_image_input


class TextInputProcessor:
    """Turns a string or a list of strings into requests, refusing bad input before any work."""

    def __init__(self, pipeline) -> None:
        self.settings = pipeline.settings
        self.hidden_size = pipeline.model.embedding_size

    def process(self, inputs: str | Sequence[str], *, prompt: str | None = None, prompt_name: str | None = None,
                options: EmbedOptions | None = None) -> list[Request]:
        """Validate ``inputs`` and return one request per text, the prompt prepended."""
        options = options or EmbedOptions()
        texts = [inputs] if isinstance(inputs, str) else inputs
        if not isinstance(texts, Sequence) or isinstance(texts, (bytes, dict)):
            raise TypeError(f"inputs: expected a str or a list of str, got {type(inputs).__name__}")
        if len(texts) == 0:
            raise ValueError("inputs: got an empty list; pass at least one text")
        for i, text in enumerate(texts):
            if not isinstance(text, str):
                got = "an image, and this model reads text only" if as_image_input(text) else type(text).__name__
                raise InputTypeError(i, f"field 'text' must be a str, got {got}")
        self.check_options(options)
        prompt = self.resolve_prompt(prompt, prompt_name)
        return [Request(i, (prompt or "") + text, options, prompt) for i, text in enumerate(texts)]

    def resolve_prompt(self, prompt: str | None, prompt_name: str | None) -> str | None:
        """Return the prompt text: given, named, the model's default, or ``None``."""
        if prompt is not None and prompt_name is not None:
            raise ValueError("pass either prompt or prompt_name, not both")
        if prompt is not None:
            if not isinstance(prompt, str):
                raise TypeError(f"prompt: expected a str, got {type(prompt).__name__}")
            return prompt
        name = prompt_name if prompt_name is not None else self.settings.default_prompt_name
        if name is None:
            return None
        if name not in self.settings.prompts:
            known = ", ".join(sorted(self.settings.prompts)) or "none"
            raise ValueError(f"prompt_name={name!r} is not among the model's prompts ({known})")
        return self.settings.prompts[name]

    def check_options(self, options: Any) -> None:
        """Refuse a ``dimensions`` that is not a positive integer no larger than the embedding."""
        dims = getattr(options, "dimensions", None)
        if dims is None:
            return
        if not isinstance(dims, int) or isinstance(dims, bool) or dims < 1:
            raise ValueError(f"dimensions={dims!r}: expected a positive integer")
        if self.hidden_size is not None and dims > self.hidden_size:
            raise ValueError(f"dimensions={dims} exceeds the model's embedding size {self.hidden_size}")
