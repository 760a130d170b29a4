"""Stages of the ``image-text`` workflow: texts and images in one list, each image decoded and preprocessed
as the directory's ``preprocessor_config.json`` says (transformers' own image processor) before any batch
runs, its patches counted as tokens; batches packing texts and images side by side."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, NamedTuple, Sequence

import torch

from wde_core.plugin_api import (EmbedOptions, FlatBatchBuilder, HFTokenizer, ImageInput, InputTypeError,
                                 InputValueError, ModelInput, Request,
                                 TextInputProcessor, TokenEmbedOptions, as_image_input, move_to)
from wde_clip.text_tower import pooled_token
from wde_clip.towers_config import Towers
from wde_images.public import exact_preprocessor, load_image


PREPROCESS_CHUNK = 16  # images decoded at once: bounds the decoded originals held, amortizes the processor's call


class ImageTextInputProcessor(TextInputProcessor):
    """A text, an image input, or a list mixing them (order kept), refused item by item before any work."""

    def __init__(self, pipeline) -> None:
        super().__init__(pipeline)
        self.towers = Towers.of(pipeline.model.config, pipeline.model.architectures)
        self.hidden_size = self.towers.embedding_size

    def process(self, inputs: Any, *, prompt: str | None = None, prompt_name: str | None = None,
                options: EmbedOptions | None = None) -> list[Request]:
        """One request per item: texts get the prompt; images carry their :class:`ImageInput`."""
        if isinstance(options, TokenEmbedOptions):
            raise ValueError("embed_tokens(): an image-text model gives one vector per text or image; use encode()")
        options = options or EmbedOptions()
        items = [inputs] if isinstance(inputs, str) or as_image_input(inputs) is not None else inputs
        if not isinstance(items, Sequence) or isinstance(items, (bytes, dict)):
            raise TypeError(f"inputs: expected a text, an image or a list of them, got {type(inputs).__name__}")
        if len(items) == 0:
            raise ValueError("inputs: got an empty list; pass at least one text or image")
        self.check_options(options)
        prompt = self.resolve_prompt(prompt, prompt_name)
        return [self.request(i, item, prompt, options) for i, item in enumerate(items)]

    def request(self, index: int, item: Any, prompt: str | None, options: EmbedOptions) -> Request:
        """The request for one item, or a ``TypeError``/``ValueError`` naming it."""
        if isinstance(item, str):
            if self.towers.text is None:
                raise InputValueError(index, "a text, but this model has only a vision tower; pass images")
            return Request(index, (prompt or "") + item, options, prompt)
        image = as_image_input(item)
        if image is None:
            raise InputTypeError(index, f"expected a str (text) or an image (PIL image, pathlib.Path, bytes or "
                            f"{{'image': ...}}), got {type(item).__name__}")
        if self.towers.vision is None:
            raise InputValueError(index, "an image, but this model has only a text tower; pass texts")
        return Request(index, None, options, image=image)


class ImageTextTokenizer(HFTokenizer):
    """Texts through the model's fast tokenizer (SigLIP's padded to ``max_model_len``, as it was trained);
    images decoded (``load_image``: limits and errors) and preprocessed, one placeholder token per patch."""

    def __init__(self, pipeline) -> None:
        self.towers = Towers.of(pipeline.model.config, pipeline.model.architectures)
        if self.towers.text is not None:
            super().__init__(pipeline)
        self.image_processor = self.exact_preprocess = None
        if self.towers.vision is not None:
            from transformers import AutoImageProcessor

            self.image_processor = AutoImageProcessor.from_pretrained(str(pipeline.model.path))
            self.exact_preprocess = exact_preprocessor(self.image_processor)

    def tokenize(self, requests: list[Request], *, truncate: bool | str = True) -> None:
        """Fill each request's token ids (an image's: one per patch) and each image's pixels."""
        if truncate == "chunk":
            raise ValueError("truncate='chunk': an image-text model embeds a text whole or cut; pass truncate=True "
                             "or False")
        texts = [r for r in requests if not isinstance(r.image, ImageInput)]
        if texts and self.towers.siglip:
            self.tokenize_padded(texts, truncate)
        elif texts:
            super().tokenize(texts, truncate=truncate)
        self.preprocess([r for r in requests if isinstance(r.image, ImageInput)])

    def tokenize_padded(self, requests: list[Request], truncate: bool) -> None:
        """SigLIP: every text padded to ``max_model_len`` tokens, all of them attended (as in training)."""
        encoded = self.tokenizer([r.text for r in requests], padding="max_length", max_length=self.max_len,
                                 truncation=truncate, return_attention_mask=False, verbose=False)["input_ids"]
        for request, ids in zip(requests, encoded):
            request.token_ids = list(ids)
        if not truncate:
            self.check_lengths(requests)

    def preprocess(self, requests: list[Request]) -> None:
        """Decode the images (errors name the input) and run the image processor on them, ``PREPROCESS_CHUNK`` at a
        time: only preprocessed pixels are kept, so a call's memory grows with its images at the model's size."""
        for start in range(0, len(requests), PREPROCESS_CHUNK):
            chunk = requests[start:start + PREPROCESS_CHUNK]
            pictures = [load_image(r.image, r.index) for r in chunk]
            if self.exact_preprocess is not None:  # the processor's own values, bit for bit, in less time
                processed = {"pixel_values": self.exact_preprocess(pictures)}
            else:
                processed = self.image_processor(images=pictures, return_tensors="pt")
            del pictures
            grids = processed.get("spatial_shapes")  # SigLIP 2: each image's own patch grid, padding after it
            for i, request in enumerate(chunk):
                pixels = processed["pixel_values"][i]
                if grids is None:
                    request.image, tokens = pixels, self.towers.tokens_per_image
                else:
                    height, width = grids[i].tolist()
                    tokens = height * width
                    request.image = PatchGrid(pixels[:tokens].clone(), height, width)
                request.token_ids = [0] * tokens


class PatchGrid(NamedTuple):
    """A SigLIP 2 image: its flattened patches ``[height * width, C*p*p]`` and its grid."""

    patches: torch.Tensor
    height: int
    width: int


@dataclass
class TextBatch(ModelInput):
    """The texts of a batch, packed, with each text's pooled token (``pool_index``, into the packed tokens)."""

    pool_index: torch.Tensor | None = None


@dataclass
class ImageTextBatch:
    """One batch of texts and images: ``texts`` packed (or ``None``); the images' ``pixel_values`` (``[images, C,
    S, S]``, or SigLIP 2's patches ``[tokens, C*p*p]`` with each image's ``spatial_shapes``), each image's token
    count and first token, and their attention metadata; ``text_rows``/``image_rows`` put vectors in batch order."""

    texts: TextBatch | None
    pixel_values: torch.Tensor | None
    image_metadata: Any
    text_rows: torch.Tensor
    image_rows: torch.Tensor
    num_seqs: int
    image_lens: list[int] = dataclasses.field(default_factory=list)
    image_starts: torch.Tensor | None = None
    spatial_shapes: torch.Tensor | None = None
    outputs: frozenset = frozenset({"dense"})

    def to(self, device: torch.device) -> "ImageTextBatch":
        """A copy with every tensor on ``device``."""
        return move_to(self, device)


class ImageTextBatchBuilder(FlatBatchBuilder):
    """Packs a batch's texts as the core does and stacks its images' pixels; no padding either way."""

    def __init__(self, pipeline, attention_backend) -> None:
        super().__init__(pipeline, attention_backend)
        self.towers = Towers.of(pipeline.model.config, pipeline.model.architectures)

    def build(self, requests: list[Request]) -> ImageTextBatch:
        """Split ``requests`` into texts and images, keeping where each goes in the batch."""
        text_rows = [i for i, r in enumerate(requests) if r.image is None]
        image_rows = [i for i, r in enumerate(requests) if r.image is not None]
        texts = self.build_texts([requests[i] for i in text_rows]) if text_rows else None
        batch = ImageTextBatch(texts, None, None, torch.tensor(text_rows, dtype=torch.long),
                               torch.tensor(image_rows, dtype=torch.long), len(requests))
        if image_rows:
            self.add_images(batch, [requests[i] for i in image_rows])
        return batch

    def add_images(self, batch: ImageTextBatch, requests: list[Request]) -> None:
        """The images' pixels (or patches), token counts, first tokens and attention metadata."""
        images = [r.image for r in requests]
        if isinstance(images[0], PatchGrid):
            batch.pixel_values = torch.cat([image.patches for image in images])
            batch.spatial_shapes = torch.tensor([(image.height, image.width) for image in images])
        else:
            batch.pixel_values = torch.stack(images)
        batch.image_lens = [r.num_tokens for r in requests]
        cu_seqlens = torch.zeros(len(images) + 1, dtype=torch.int32)
        torch.cumsum(torch.tensor(batch.image_lens), 0, out=cu_seqlens[1:])
        batch.image_starts = cu_seqlens[:-1].long()
        batch.image_metadata = self.attention.build_metadata(batch.image_lens, cu_seqlens, causal=False)

    def build_texts(self, requests: list[Request]) -> TextBatch:
        """The core's packed batch of the texts, plus each one's pooled token."""
        packed = super().build(requests)
        starts = packed.cu_seqlens[:-1].tolist()
        pooled = [start + pooled_token(r.token_ids, self.towers.eos_token_id, self.towers.siglip)
                  for start, r in zip(starts, requests)]
        fields = {f.name: getattr(packed, f.name) for f in dataclasses.fields(packed)}
        return TextBatch(**fields, pool_index=torch.tensor(pooled, dtype=torch.long))
