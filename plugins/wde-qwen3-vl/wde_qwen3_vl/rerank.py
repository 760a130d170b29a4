"""Qwen3-VL-Reranker: (query, document) pairs, either side a text, an image or a text with an image, laid out as its
official script lays them out (a system turn asking for "yes" or "no", then ``<Instruct>: ...<Query>:...`` and
``\\n<Document>:...`` in the user turn, each side's image before its text, ``NULL`` for an empty side, the assistant's
header last), scored ``sigmoid(logit("yes") - logit("no"))`` at the last token: only those two rows of the
language-model head are kept (wde-llm-rerank's ``AnswerRows``)."""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Sequence

from wde_core.plugin_api import EngineArgs, ImageInput, Request, ScoreOptions, as_image_input
from wde_core.plugin_api import InputTypeError, InputValueError
from wde_vision_language.public import VisionTextTokenizer, refuse_placeholders

SYSTEM = ("Judge whether the Document meets the requirements based on the Query and the Instruct provided. Note that "
          "the answer can only be \"yes\" or \"no\".")
DEFAULT_INSTRUCTION = "Given a search query, retrieve relevant candidates that answer the query."
HEAD = "<|im_start|>system\n" + SYSTEM + "<|im_end|>\n<|im_start|>user\n<Instruct>: {instruction}<Query>:"
TAIL = "<|im_end|>\n<|im_start|>assistant\n"
SIDES = ("query", "document")


def is_qwen3_vl_reranker(directory) -> str | None:
    """The variant's matcher: a reason when the model id, path or ``_name_or_path`` names a Qwen3-VL-Reranker."""
    from wde_llm_rerank.public import name_match

    return name_match(directory, "qwen3-vl-reranker", "Qwen3-VL yes/no reranker")


def configure(propose, directory, args) -> None:
    """Causal attention, the last token pooled, sigmoid of logit("yes") - logit("no"), the answers' token ids."""
    from wde_core.plugin_api import rope_type
    from wde_llm_rerank.public import answer_token_ids, require_answer_at_last_token

    rope_type(directory.config.text_config)
    require_answer_at_last_token(propose, "yes or no")
    propose.notes.pop("shared_prefix", None)  # this reranker's pairs are each laid out whole
    ids = propose.extras["answer_token_ids"] = answer_token_ids(directory.path)
    propose.require("activation", "sigmoid", f"sigmoid(logit('yes') - logit('no')) at the last token (token ids "
                                             f"{ids}), as Qwen3-VL-Reranker's script scores")
    propose.length_limit = (directory.config.text_config.max_position_embeddings,
                            "Qwen3-VL's text max_position_embeddings")


@dataclass
class VisionRerankEngineArgs(EngineArgs):
    """The core's arguments plus ``instruction``, the ``<Instruct>`` of every pair (default: the script's "Given a
    search query, retrieve relevant candidates that answer the query.")."""

    instruction: str | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.instruction is not None and not isinstance(self.instruction, str):
            raise ValueError(f"engine argument instruction={self.instruction!r}: expected a str or None")
        refuse_placeholders("instruction", self.instruction)


@dataclass
class Side:
    """One side of a pair: its text (``""`` for none) and whether an image goes before it."""

    text: str
    image: bool


class VisionPairInputProcessor:
    """``(query, document)`` pairs whose sides are each a str, an image or a ``{"text", "image"}`` dict, checked
    before any work, naming the pair and the side."""

    def __init__(self, pipeline) -> None:
        pass

    def process(self, inputs: Any, *, options: ScoreOptions | None = None, prompt: str | None = None,
                prompt_name: str | None = None) -> list[Request]:
        """One request per pair: ``text`` is its two :class:`Side`s, ``image`` the tuple of its images (the query's
        first), ``None`` if it has none."""
        if prompt is not None or prompt_name is not None:
            raise ValueError("Qwen3-VL-Reranker takes no prompt; pass the engine argument instruction=")
        if isinstance(inputs, (str, bytes, dict)) or not isinstance(inputs, Sequence):
            raise TypeError(f"inputs: expected a list of (query, document) pairs, got {type(inputs).__name__}")
        if len(inputs) == 0:
            raise ValueError("inputs: got an empty list; pass at least one pair")
        return [self.pair(i, item, options or ScoreOptions()) for i, item in enumerate(inputs)]

    @staticmethod
    def pair(index: int, item: Any, options: ScoreOptions) -> Request:
        """The request of one pair, or an error naming it and its side."""
        if not isinstance(item, (tuple, list)) or len(item) != 2:
            raise InputTypeError(index, f"expected a (query, document) pair, got {type(item).__name__}")
        sides, images = [], []
        for name, value in zip(SIDES, item):
            text, image = side_parts(index, name, value)
            sides.append(Side(text, image is not None))
            images += [image] if image is not None else []
        return Request(index, tuple(sides), options, image=tuple(images) or None)


def side_parts(index: int, name: str, value: Any) -> tuple[str, ImageInput | None]:
    """A side's text and image, or a ``TypeError`` naming the pair and the side."""
    if isinstance(value, str):
        return value, None
    if isinstance(value, dict) and set(value) == {"text", "image"}:
        if not isinstance(value["text"], str):
            raise InputTypeError(index, f"field '{name}.text' must be a str, got {type(value['text']).__name__}")
        return value["text"], ImageInput(value["image"])
    image = as_image_input(value)
    if image is None:
        raise InputTypeError(index, f"field {name!r} must be a str, an image or a {{'text', 'image'}} dict, got "
                        f"{type(value).__name__}")
    return "", image


def rerank_text(query: Side, document: Side, instruction: str, pads: list[str]) -> tuple[str, str, str]:
    """The pair's prompt as (before the document's text, the document's text, after it); ``pads``: the placeholder
    tokens of the pair's images, in order."""
    queue = list(pads)

    def vision(part: Side) -> str:
        return "<|vision_start|>" + queue.pop(0) + "<|vision_end|>" if part.image else ""

    head = HEAD.format(instruction=instruction) + (vision(query) + query.text or "NULL") + "\n<Document>:"
    return head + vision(document), document.text or ("" if document.image else "NULL"), TAIL


class VisionRerankTokenizer(VisionTextTokenizer):
    """Each pair in Qwen3-VL-Reranker's prompt, its images through the directory's image processor; over
    ``max_model_len``, the document's text is cut when truncating, and a pair that still does not fit (or is not
    cut) is refused."""

    def __init__(self, pipeline) -> None:
        super().__init__(pipeline)
        self.instruction = getattr(pipeline.args, "instruction", None) or DEFAULT_INSTRUCTION

    def tokenize(self, requests: list[Request], *, truncate: bool | str = True) -> None:
        """Fill token ids (and the images' pixels)."""
        if truncate not in (True, False):
            raise ValueError(f"truncate={truncate!r}: a reranker's pair is scored whole or with its document cut; "
                             "pass True or False")
        for request in requests:
            for name, side in zip(SIDES, request.text):
                token = self.placeholder_in(side.text)
                if token is not None:
                    raise InputValueError(request.index, f"the {name} contains the placeholder token {token!r}; "
                                     "pass images as images")
        for request in requests:
            pads = self.preprocess_images(request)
            head, text, tail = rerank_text(*request.text, self.instruction, pads)
            request.token_ids = self.cut_to_fit(head, text, tail, truncate)
            if request.num_tokens > self.max_len:
                fits_cut = text and len(self.tokenizer(head + tail)["input_ids"]) < self.max_len
                raise InputValueError(request.index, f"the formatted pair has {request.num_tokens} tokens, more "
                                 f"than max_model_len={self.max_len}" + (
                                     "; pass truncate=True" if not truncate and fits_cut else
                                     "; the query, the images and the prompt alone do not fit: shorten them"))

    def preprocess_images(self, request: Request) -> list[str]:
        """Decode and preprocess the pair's images (errors name the pair, and the query when it is its image); their
        placeholder tokens."""
        sides = [name for name, side in zip(SIDES, request.text) if side.image]
        done = [self.image_pixels(image, f"input {request.index} (query)" if side == "query" else request.index)
                for image, side in zip(request.image or (), sides)]
        request.image = tuple(pixels for pixels, _ in done) or None
        request.vision_tokens = sum(pixels.patches.shape[0] for pixels, _ in done)
        return [pads for _, pads in done]


def answer_head_config(config) -> SimpleNamespace:
    """What ``AnswerRows`` reads of a Qwen3-VL config: the (top-level) tie flag, the decoder's sizes."""
    text = config.text_config
    tied = getattr(config, "tie_word_embeddings", None)
    return SimpleNamespace(tie_word_embeddings=getattr(text, "tie_word_embeddings", False) if tied is None else tied,
                           vocab_size=text.vocab_size, hidden_size=text.hidden_size)
