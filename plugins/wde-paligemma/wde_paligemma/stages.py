"""Stages of the ``colpali`` workflow (beside wde-vision-language's query/page input processor and
wde-late-interaction's multi-vector output): queries and pages laid out by the directory's own ``ColPaliProcessor``
(a query: ``<bos>``, the query prefix, the text, ten augmentation tokens and a newline; a page: one ``<image>`` token
per patch, ``<bos>``, the visual prompt and a newline), the pages' pixels as its image processor makes them; batches
packing them all, the pixels stacked."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from wde_core.plugin_api import FlatBatchBuilder, ModelInput, Request
from wde_images.public import exact_preprocessor, load_image
from wde_vision_language.public import QueryPageTokenizer


def image_tokens(config) -> int:
    """Patches of a page, one ``<image>`` token each: ``(image_size // patch_size) ** 2``."""
    vision = config.vlm_config.vision_config
    return (vision.image_size // vision.patch_size) ** 2


@dataclass(frozen=True)
class PagePixels:
    """A page's ``pixel_values`` ``[3, S, S]`` as the image processor makes them."""

    pixels: torch.Tensor


class ColPaliTokenizer(QueryPageTokenizer):
    """Queries as ``ColPaliProcessor.process_queries`` lays them out (wde-vision-language's query handling: placeholders
    refused, cut to ``max_model_len`` when ``truncate``); a page's tokens (the same for every page) and pixels as
    ``process_images`` makes them, the pixels through wde-images' exact PIL preprocessing where it applies."""

    def __init__(self, pipeline) -> None:
        super().__init__(pipeline)
        from PIL import Image

        self.image_processor = self.processor.image_processor
        self.exact = exact_preprocessor(self.image_processor)
        blank = Image.new("RGB", (8, 8), "white")
        self.page_ids = self.processor.process_images([blank])["input_ids"][0].tolist()
        self.vision_tokens = image_tokens(pipeline.model.config)
        if self.page_ids.count(self.image_token_id) != self.vision_tokens:
            raise ValueError(f"model {pipeline.model.path.name!r}: the processor puts "
                             f"{self.page_ids.count(self.image_token_id)} <image> tokens in a page, the vision tower "
                             f"makes {self.vision_tokens} patches (image_seq_length must match them)")

    def preprocess(self, request: Request) -> None:
        """Decode the page (errors name the input), its pixels and token ids as the processor makes them."""
        picture = load_image(request.image, request.index)
        if self.exact is not None:  # the processor's own values, bit for bit, in less time
            pixels = self.exact([picture])[0]
        else:
            pixels = self.image_processor(images=[picture], return_tensors="pt")["pixel_values"][0]
        request.token_ids = list(self.page_ids)
        request.image = PagePixels(pixels)
        request.vision_tokens = self.vision_tokens  # the vision tower's rows: the scheduler counts them


@dataclass
class ColPaliBatch(ModelInput):
    """The packed tokens of a batch's queries and pages, plus the pages' ``pixel_values [pages, 3, S, S]``, their
    patches' attention metadata (``image_metadata``: each page one bidirectional sequence) and where the projected
    patches go (``image_token_index``, into the packed tokens)."""

    pixel_values: torch.Tensor | None = None
    image_metadata: Any = None
    image_token_index: torch.Tensor | None = None


class ColPaliBatchBuilder(FlatBatchBuilder):
    """The core's packed batch, and the pages' pixels stacked in the order their pages are packed."""

    def __init__(self, pipeline, attention_backend) -> None:
        super().__init__(pipeline, attention_backend)
        self.image_token_id = pipeline.model.config.vlm_config.image_token_id
        self.patches = image_tokens(pipeline.model.config)

    def build(self, requests: list[Request]) -> ColPaliBatch:
        """Pack ``requests``; add the pixels of those that are pages."""
        packed = super().build(requests)
        batch = ColPaliBatch(**{name: getattr(packed, name) for name in packed.__dataclass_fields__})
        pages = [r.image.pixels for r in requests if isinstance(r.image, PagePixels)]
        if pages:
            batch.pixel_values = torch.stack(pages)
            lens = [self.patches] * len(pages)
            cu_seqlens = torch.arange(0, self.patches * (len(pages) + 1), self.patches, dtype=torch.int32)
            batch.image_metadata = self.attention.build_metadata(lens, cu_seqlens, causal=False)
            batch.image_token_index = torch.nonzero(batch.input_ids == self.image_token_id).flatten()
        return batch
