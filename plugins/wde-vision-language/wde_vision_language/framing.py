"""How a vision-language embedder frames an input: ``plain`` (the image's placeholder, then the prompt and the text,
as ``Qwen2VLProcessor`` lays out a bare input) or ``chat`` (the model's own chat template around it: a system turn
holding the instruction, a user turn holding the image and the text, then the assistant's header, whose last token
is pooled: Qwen3-VL-Embedding's scripts, and GME's with ``chat_suffix="<|endoftext|>"``)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from wde_core.plugin_api import EngineArgs

FRAMINGS = ("plain", "chat")
DEFAULT_INSTRUCTION = "Represent the user's input."  # Qwen3-VL-Embedding's default system instruction
TEXT_MARK = "\x00wde-text\x00"  # stands for the text while the template is rendered (split around it when cut)


@dataclass
class VisionTextEngineArgs(EngineArgs):
    """The core's arguments plus ``framing`` (``"plain"`` or ``"chat"``; ``None``: the model's default, which its
    plugin decides: wde-qwen3-vl's is chat wherever the directory has a chat template), ``instruction`` (the chat's
    system turn when a call passes no ``prompt``; default ``"Represent the user's input."``) and ``chat_suffix``
    (text after the assistant's header, e.g. GME's ``"<|endoftext|>"``); both refused when the framing is plain."""

    framing: str | None = None
    instruction: str | None = None
    chat_suffix: str = ""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.framing is not None and self.framing not in FRAMINGS:
            raise ValueError(f"engine argument framing={self.framing!r}: expected one of {', '.join(FRAMINGS)}")
        for name in ("instruction", "chat_suffix"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                raise ValueError(f"engine argument {name}={value!r}: expected a str")
            refuse_placeholders(name, value)


def refuse_placeholders(name: str, value: str | None) -> None:
    """An engine argument spelling an image or video placeholder token is refused, naming it."""
    for token in ("<|image_pad|>", "<|video_pad|>", "<|vision_start|>", "<|vision_end|>"):
        if token in (value or ""):
            raise ValueError(f"engine argument {name}: contains the placeholder token {token!r}")


def framing_of(pipeline) -> str:
    """The pipeline's framing: the engine argument, else what the model's ``configure`` decided, else ``plain``."""
    asked = getattr(pipeline.args, "framing", None)
    return asked or pipeline.settings.extras.get("framing", "plain")


def find_chat_template(directory: Path) -> str | None:
    """The directory's chat template: ``chat_template.jinja``, ``chat_template.json`` (the processor's), else
    ``tokenizer_config.json``'s; ``None`` if it has none."""
    jinja = directory / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text(encoding="utf-8")
    for name in ("chat_template.json", "tokenizer_config.json"):
        if (directory / name).is_file():
            template = json.loads((directory / name).read_text(encoding="utf-8")).get("chat_template")
            if isinstance(template, list):  # named templates: [{"name": ..., "template": ...}]
                template = next((item["template"] for item in template if item.get("name") == "default"), None)
            if template:
                return template
    return None


class ChatFraming:
    """Renders one input through the model's chat template: ``(head, tail)`` around its text."""

    def __init__(self, pipeline, tokenizer) -> None:
        self.template = find_chat_template(Path(pipeline.model.path))
        if self.template is None:
            raise ValueError("engine argument framing='chat': the model directory has no chat template "
                             "(chat_template.jinja, chat_template.json or the tokenizer's); use framing='plain'")
        self.tokenizer = tokenizer
        self.instruction = getattr(pipeline.args, "instruction", None) or DEFAULT_INSTRUCTION
        self.suffix = getattr(pipeline.args, "chat_suffix", "") or ""

    def around(self, has_text: bool, has_image: bool, instruction: str | None) -> tuple[str, str]:
        """The framed input before and after its text (``has_text=False``: all of it in ``head``)."""
        content = ([{"type": "image"}] if has_image else []) + (
            [{"type": "text", "text": TEXT_MARK}] if has_text else [])
        messages = [{"role": "system", "content": [{"type": "text", "text": instruction or self.instruction}]},
                    {"role": "user", "content": content}]
        rendered = self.tokenizer.apply_chat_template(messages, chat_template=self.template, tokenize=False,
                                                      add_generation_prompt=True) + self.suffix
        if rendered.count("<|image_pad|>") != int(has_image):
            raise ValueError(f"the chat template placed {rendered.count('<|image_pad|>')} image placeholders for "
                             f"{int(has_image)} image: it does not lay out images as Qwen-VL's do; use framing='plain'")
        head, _, tail = rendered.partition(TEXT_MARK)
        return head, tail
