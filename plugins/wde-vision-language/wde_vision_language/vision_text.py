"""Stages of the single-vector vision-language embedders (``qwen2-vl-embed``, and wde-qwen3-vl's ``qwen3-vl-embed``):
texts, images and text + image inputs in one list, framed ``plain`` (the image's placeholder, then the prompt and the
text, as ``Qwen2VLProcessor`` lays out a bare input) or ``chat`` (the model's chat template: the instruction as the
system turn; ``wde_vision_language.framing``), one ``<|image_pad|>`` per merged 2x2 block of patches; batches add each
token's multimodal rotary positions."""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Sequence

import torch

from wde_core.plugin_api import EmbedOptions, ImageInput, Request, TokenEmbedOptions, as_image_input
from wde_core.plugin_api import InputTypeError, InputValueError
from wde_images.public import load_image
from wde_vision_language.framing import ChatFraming, framing_of
from wde_vision_language.query_page import (PagePixels, QueryPageBatch, QueryPageBatchBuilder,
                                           QueryPageInputProcessor, QueryPageTokenizer, pages_of, vl_config)
from wde_vision_language.video import (VIDEO, VideoFrames, check_frame_sizes, frame_groups, frame_size, group_times,
                                       is_video, time_interval, video_input, video_sizing)
from wde_vision_language.vl_model import mrope_positions

VISION = "<|vision_start|><|image_pad|><|vision_end|>"  # Qwen2-VL's image placeholder, before the text


class VisionTextInputProcessor(QueryPageInputProcessor):
    """A text, an image, a ``{"text": str, "image": image}`` pair, or a list mixing them; ``prompt`` (or the model's
    ``prompt_name``) goes before each text (``plain``) or is the chat's system instruction (``chat``)."""

    def __init__(self, pipeline) -> None:
        from wde_core.plugin_api import TextInputProcessor

        self.prompts = TextInputProcessor(pipeline)  # the pooled vector is the decoder's: dimensions checked against it
        self.prompts.hidden_size = self.prompts.hidden_size or vl_config(pipeline.model.config).text_config.hidden_size
        self.chat = framing_of(pipeline) == "chat"

    def process(self, inputs: Any, *, prompt: str | None = None, prompt_name: str | None = None,
                options: EmbedOptions | None = None) -> list[Request]:
        """One request per item; an image (alone or with a text) carries its :class:`ImageInput`."""
        options = options or EmbedOptions()
        if isinstance(options, TokenEmbedOptions):
            raise ValueError("embed_tokens(): this vision-language embedder gives one vector per input; use encode()")
        self.prompts.check_options(options)
        text_prompt = self.prompts.resolve_prompt(prompt, prompt_name) or ""
        items = [inputs] if isinstance(inputs, (str, dict)) or as_image_input(inputs) is not None else inputs
        if not isinstance(items, Sequence) or isinstance(items, bytes):
            raise TypeError(f"inputs: expected a text, an image, a text + image dict or a list of them, got "
                            f"{type(inputs).__name__}")
        if len(items) == 0:
            raise ValueError("inputs: got an empty list; pass at least one input")
        return [self.pair(i, item, text_prompt, options) for i, item in enumerate(items)]

    def pair(self, index: int, item: Any, prompt: str, options: EmbedOptions) -> Request:
        """The request for a text, an image or a ``{"text", "image"}`` dict, or an error naming the input; ``text`` is
        the prompt + the text (``plain``) or the text alone, the prompt kept as the instruction (``chat``)."""
        if is_video(item):
            text, video = video_input(index, item)
            text = (text or "") if self.chat else prompt + (text or "")
            return Request(index, text, options, prompt or None, image=video)
        if isinstance(item, dict) and set(item) == {"text", "image"}:
            if not isinstance(item["text"], str):
                raise InputTypeError(index, f"field 'text' must be a str, got {type(item['text']).__name__}")
            text = item["text"] if self.chat else prompt + item["text"]
            return Request(index, text, options, prompt or None, image=ImageInput(item["image"]))
        request = self.request(index, item, options)
        if request.image is None and not self.chat:
            request.text = prompt + request.text
        request.text, request.prompt = request.text or "", prompt or None
        return request


class VisionTextTokenizer(QueryPageTokenizer):
    """A vision-language embedder's inputs laid out as ``Qwen2VLProcessor`` does (which transformers cannot build
    without torchvision): an image through the directory's image processor, its placeholder (one ``<|image_pad|>``
    per merged 2x2 block of patches) before its text, tokenized by the model's tokenizer; with ``framing="chat"``
    inside the model's chat template (a text over ``max_model_len`` is cut inside the frame)."""

    def __init__(self, pipeline) -> None:
        from transformers import AutoImageProcessor

        self.tokenizer = pipeline.hf_tokenizer()
        self.image_processor = AutoImageProcessor.from_pretrained(str(pipeline.model.path))
        self.max_len = pipeline.settings.max_model_len
        config = vl_config(pipeline.model.config)
        self.image_token_id = config.image_token_id
        self.vision_config, self.model_type = config.vision_config, config.model_type
        self.video_sizing = video_sizing(pipeline.model.path)
        video_token = getattr(config, "video_token_id", None)
        self.video_token_id = video_token if video_token == self.tokenizer.convert_tokens_to_ids("<|video_pad|>") \
            else None
        self.placeholders = ["<|image_pad|>", "<|video_pad|>"]
        self.frame = lru_cache(maxsize=64)(ChatFraming(pipeline, self.tokenizer).around) \
            if framing_of(pipeline) == "chat" else None
        for name in ("instruction", "chat_suffix") if hasattr(pipeline.args, "framing") else ():  # vision-text's
            if self.frame is None and getattr(pipeline.args, name, None):
                raise ValueError(f"engine argument {name}: used only with framing='chat', and this model is framed "
                                 "plain (engine argument framing, or wde inspect's framing)")

    def tokenize(self, requests: list[Request], *, truncate: bool | str = True) -> None:
        """Fill token ids (and images' pixels); over ``max_model_len``: a text is cut when ``truncate``, an image
        input refused."""
        if truncate not in (True, False):
            raise ValueError(f"truncate={truncate!r}: a vision-language embedder embeds an input whole or cut; pass "
                             "True or False")
        self.check_placeholders(requests, "text")
        if self.frame is not None:
            self.check_instructions(requests)
        texts = [r for r in requests if r.image is None]
        if texts and self.frame is None:
            encoded = self.tokenizer([r.text for r in texts], truncation=truncate, max_length=self.max_len,
                                     return_attention_mask=False, verbose=False)["input_ids"]
            for request, ids in zip(texts, encoded):
                request.token_ids = list(ids)
        for request in texts if self.frame is not None else ():
            request.token_ids = self.framed_ids(request, "", truncate)
        for request in (r for r in requests if r.image is not None):
            video = isinstance(request.image, VideoFrames)
            pads = self.preprocess_video(request) if video else self.preprocess_image(request)
            bare = VIDEO.replace("<|video_pad|>", pads) if video else VISION.replace("<|image_pad|>", pads)
            request.token_ids = (self.tokenizer(bare + request.text, return_attention_mask=False)["input_ids"]
                                 if self.frame is None else self.framed_ids(request, pads, False))
            if video and request.num_tokens > self.max_len:
                raise InputValueError(request.index, f"the video input has {request.num_tokens} tokens, more than "
                                 f"max_model_len={self.max_len}; raise max_model_len or pass fewer or smaller frames")
        self.check_lengths(requests, "image input")

    def preprocess_image(self, request: Request) -> str:
        """Decode the request's image (errors name the input), put its patches and grid in ``request.image`` and
        return its placeholder tokens: one ``<|image_pad|>`` per merged 2x2 block of patches."""
        request.image, pads = self.image_pixels(request.image, request.index)
        request.vision_tokens = request.image.patches.shape[0]  # the vision tower's rows: the scheduler counts them
        return pads

    def image_pixels(self, image, where: int | str) -> tuple[PagePixels, str]:
        """An image input decoded (errors name ``where``) and preprocessed: its patches and grid, and its
        placeholder tokens."""
        pixels = self.processed(load_image(image, where))
        t, h, w = pixels.grid
        return pixels, "<|image_pad|>" * (t * h * w // self.image_processor.merge_size ** 2)

    def processed(self, picture, **overrides) -> PagePixels:
        """A decoded image through the directory's image processor (``overrides``: its keyword arguments)."""
        processed = self.image_processor(images=[picture], return_tensors="pt", **overrides)
        return PagePixels(processed["pixel_values"], tuple(int(x) for x in processed["image_grid_thw"][0]))

    def preprocess_video(self, request: Request) -> str:
        """Decode and preprocess a video's frames (errors name the input and frame), put their patches in groups of
        frames in ``request.image``, and return its placeholder tokens: one ``<|video_pad|>`` per merged 2x2 block of
        patches of every group (Qwen3-VL: each group its own ``<t seconds><|vision_start|>...<|vision_end|>``)."""
        video, where = request.image, f"input {request.index}: field 'video' frame"
        if self.video_token_id is None:
            raise InputValueError(request.index, f"field 'video': this model's config names no video token "
                             "(video_token_id matching <|video_pad|>); it cannot read videos")
        pictures = [load_image(frame, f"{where} {k}") for k, frame in enumerate(video.frames)]
        frames = [self.frame_pixels(picture, len(pictures)) for picture in pictures]
        check_frame_sizes([frame.grid for frame in frames], request.index)
        temporal = self.image_processor.temporal_patch_size
        patches = frame_groups([frame.patches for frame in frames], getattr(self.vision_config, "in_channels", 3),
                               temporal)
        _, h, w = frames[0].grid
        groups, blocks = patches.shape[0] // (h * w), h * w // self.image_processor.merge_size ** 2
        request.vision_tokens = patches.shape[0]
        if not self.model_type.startswith("qwen3"):
            request.image = PagePixels(patches, (groups, h, w), time_interval(self.vision_config, video.fps))
            return "<|video_pad|>" * (groups * blocks)
        request.image = tuple(PagePixels(group, (1, h, w)) for group in patches.split(h * w))
        return "".join(f"<{seconds:.1f} seconds><|vision_start|>{'<|video_pad|>' * blocks}<|vision_end|>"
                       for seconds in group_times(len(frames), video.fps, temporal))

    def frame_pixels(self, picture, frames: int) -> PagePixels:
        """One decoded frame preprocessed as an image; first resized to the size the directory's video processor
        gives a video of ``frames`` such frames (``video_preprocessor_config.json``), if it has one."""
        if self.video_sizing is None:
            return self.processed(picture)
        picture = picture.convert("RGB")
        factor = self.image_processor.patch_size * self.image_processor.merge_size
        height, width = frame_size(self.video_sizing, frames, picture.height, picture.width, factor,
                                   self.image_processor.temporal_patch_size)
        picture = picture.resize((width, height), resample=self.video_sizing.resample)
        return self.processed(picture, size={"shortest_edge": 1, "longest_edge": height * width})  # kept at its size

    def framed_ids(self, request: Request, pads: str, truncate: bool) -> list[int]:
        """The token ids of ``request`` inside the chat frame (``pads``: its image's placeholder tokens); a text over
        ``max_model_len`` is cut at its end when ``truncate``, the frame kept whole."""
        head, tail = self.frame(bool(request.text), bool(pads), request.prompt)
        head = head.replace("<|image_pad|>", pads)
        ids = self.cut_to_fit(head, request.text, tail, truncate)
        if truncate and request.text and len(ids) > self.max_len:
            frame = sum(len(self.tokenizer(part, add_special_tokens=False)["input_ids"]) for part in (head, tail))
            raise InputValueError(request.index, f"the chat frame and its instruction alone take {frame} tokens, "
                             f"max_model_len={self.max_len}; shorten the instruction or raise max_model_len")
        return ids

    def cut_to_fit(self, head: str, text: str, tail: str, truncate: bool) -> list[int]:
        """The tokens of ``head + text + tail``; over ``max_model_len`` and truncating, ``text``'s cut at its end to
        fit (still over when ``head`` and ``tail`` alone do not fit)."""
        ids = self.tokenizer(head + text + tail, return_attention_mask=False)["input_ids"]
        if len(ids) <= self.max_len or not truncate or not text:
            return ids
        parts = [self.tokenizer(part, add_special_tokens=False)["input_ids"] for part in (head, text, tail)]
        room = self.max_len - len(parts[0]) - len(parts[2])
        return parts[0] + parts[1][:room] + parts[2] if room > 0 else ids

    def check_instructions(self, requests: list[Request]) -> None:
        """Refuse an instruction (``prompt``) that spells an image or video placeholder token, naming its input."""
        for request in requests:
            token = self.placeholder_in(request.prompt)
            if token is not None:
                raise InputValueError(request.index, f"the prompt (the chat's instruction) contains the "
                                 f"placeholder token {token!r}")


class VisionTextBatchBuilder(QueryPageBatchBuilder):
    """The query/page batch plus each token's (temporal, row, column) positions, as ``get_rope_index`` makes them."""

    def build(self, requests: list[Request]) -> QueryPageBatch:
        """Pack ``requests``; add the images' patches and the packed ``[3, T]`` multimodal positions."""
        batch = super().build(requests)
        batch.mrope_positions = torch.cat([
            mrope_positions(r.token_ids, [page.grid for page in pages_of(r)], self.image_token_id, self.merge,
                            self.video_token_id, [page.interval for page in pages_of(r)])
            for r in requests], dim=1)
        return batch
