"""Query/page stages of late-interaction vision-language models (ColQwen2's ``colqwen2`` workflow; ColPali's builds on
the input processor and tokenizer): text queries and page images in one list, each laid out by the directory's
``ColQwen2Processor`` (queries as ``"Query: "`` + text + ten augmentation tokens, pages as the visual prompt, one
``<|image_pad|>`` per merged 2x2 block of patches); batches packing them all, the pages' patches beside them; every
token's vector out (wde-late-interaction's ``multi-vector`` output). The single-vector embedders' stages build on
these (``wde_vision_language.vision_text``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import torch

from wde_core.plugin_api import EmbedOptions, FlatBatchBuilder, ModelInput, Request, TokenEmbedOptions, as_image_input
from wde_core.plugin_api import InputTypeError, InputValueError
from wde_images.public import load_image
from wde_vision_language.vision import patch_positions
from wde_vision_language.window_vision import build_windows, window_units

OUTPUTS = ("multi_vector",)  # what a query or page gives by default: every token's vector (late interaction)


def vl_config(config):
    """The vision-language config of a model directory (ColQwen2's and ColPali's ``vlm_config``, else the config
    itself)."""
    return getattr(config, "vlm_config", config)


def model_name(pipeline) -> str:
    """The late-interaction model's name for messages: ``ColQwen2ForRetrieval`` -> ``ColQwen2``."""
    architectures = list(getattr(pipeline.model, "architectures", None) or ["this model"])
    return architectures[0].removesuffix("ForRetrieval")


class QueryPageInputProcessor:
    """A text (query), an image (page), or a list mixing them, refused item by item before any work (ColQwen2's and
    ColPali's)."""

    def __init__(self, pipeline) -> None:
        self.name = model_name(pipeline)

    def process(self, inputs: Any, *, prompt: str | None = None, prompt_name: str | None = None,
                options: EmbedOptions | None = None) -> list[Request]:
        """One request per item; images carry their :class:`ImageInput`."""
        if isinstance(options, TokenEmbedOptions):
            raise ValueError(f"embed_tokens(): {self.name}'s token vectors are encode(..., output='multi_vector')")
        if prompt is not None or prompt_name is not None:
            raise ValueError(f"{self.name} lays out queries and pages with its processor's own prefixes; it takes no "
                             "prompt or prompt_name")
        options = options or EmbedOptions(output=OUTPUTS)
        if getattr(options, "dimensions", None) is not None:
            raise ValueError(f"dimensions: {self.name}'s vectors are not Matryoshka-trained; leave dimensions unset")
        items = [inputs] if isinstance(inputs, str) or as_image_input(inputs) is not None else inputs
        if not isinstance(items, Sequence) or isinstance(items, (bytes, dict)):
            raise TypeError(f"inputs: expected a query, a page image or a list of them, got {type(inputs).__name__}")
        if len(items) == 0:
            raise ValueError("inputs: got an empty list; pass at least one query or page")
        return [self.request(i, item, options) for i, item in enumerate(items)]

    @staticmethod
    def request(index: int, item: Any, options: EmbedOptions) -> Request:
        """The request for one item, or a ``TypeError`` naming it (a ``ValueError`` for a video)."""
        if isinstance(item, dict) and "video" in item:
            raise InputValueError(index, f"field 'video': video inputs are not supported; pass images (or frames as "
                             "images)")
        if isinstance(item, str):
            if not item.strip():
                raise InputValueError(index, "empty query")
            return Request(index, item, options)
        image = as_image_input(item)
        if image is None:
            raise InputTypeError(index, f"expected a str (query) or an image (PIL image, pathlib.Path, bytes or "
                            f"{{'image': ...}}), got {type(item).__name__}")
        return Request(index, None, options, image=image)


@dataclass(frozen=True)
class PagePixels:
    """A page's (or a video's) patches ``[t * h * w, C * T * P * P]`` as the image processor flattened them, their
    grid, and the temporal position step from one of its ``t`` frame groups to the next (``interval``: Qwen2.5-VL's
    time scaling of a video; 1 otherwise)."""

    patches: torch.Tensor
    grid: tuple[int, int, int]
    interval: float = 1.0


def pages_of(request: Request) -> list[PagePixels]:
    """The preprocessed images of a request, in the order of their placeholders: its ``PagePixels``, or each of a
    tuple of them (a reranker's pair with two images)."""
    image = request.image
    return [image] if isinstance(image, PagePixels) else list(image) if isinstance(image, tuple) else []


class QueryPageTokenizer:
    """Queries and pages through the directory's ``ColQwen2Processor`` (``processor_config.json``,
    ``preprocessor_config.json`` and the tokenizer): the token ids and a page's patches as it makes them."""

    def __init__(self, pipeline) -> None:
        from transformers import AutoProcessor

        self.processor = AutoProcessor.from_pretrained(str(pipeline.model.path))
        self.name = model_name(pipeline)
        self.tokenizer = self.processor.tokenizer  # what the server's /tokenize and /decode read
        self.max_len = pipeline.settings.max_model_len
        self.image_token_id = vl_config(pipeline.model.config).image_token_id
        self.placeholders = [t for t in (getattr(self.processor, "image_token", None),
                                         getattr(self.processor.tokenizer, "video_token", None), "<|video_pad|>") if t]

    def tokenize(self, requests: list[Request], *, truncate: bool | str = True) -> None:
        """Fill token ids (and pages' pixels); over ``max_model_len``: a query is cut when ``truncate``, a page refused."""
        if truncate not in (True, False):
            raise ValueError(f"truncate={truncate!r}: {self.name} embeds a query or page whole or cut; pass True or "
                             "False")
        queries = [r for r in requests if r.image is None]
        self.check_placeholders(queries, "query")
        self.tokenize_queries(queries, truncate)
        for request in (r for r in requests if r.image is not None):
            self.preprocess(request)
        self.check_lengths(requests, "page")

    def tokenize_queries(self, queries: list[Request], truncate: bool) -> None:
        """The queries' token ids as the processor lays them out, cut to ``max_model_len`` when ``truncate``."""
        if queries:
            encoded = self.processor.process_queries([r.text for r in queries])  # padded to the longest
            unpadded = [[t for t, keep in zip(ids, mask) if keep]
                        for ids, mask in zip(encoded["input_ids"].tolist(), encoded["attention_mask"].tolist())]
            for request, ids in zip(queries, unpadded):
                if self.image_token_id in ids:  # a token id the text did not spell (another tokenizer's merge)
                    raise InputValueError(request.index, f"the query tokenizes to the image placeholder token; "
                                     "pass pages as images")
                request.token_ids = list(ids)[: self.max_len] if truncate else list(ids)

    def check_placeholders(self, requests: list[Request], kind: str) -> None:
        """Refuse a text that spells an image or video placeholder token, naming its input."""
        for request in requests:
            token = self.placeholder_in(request.text)
            if token is not None:
                raise InputValueError(request.index, f"the {kind} contains the placeholder token {token!r}; "
                                 "pass images as images")

    def placeholder_in(self, text: str | None) -> str | None:
        """The first image or video placeholder token ``text`` spells, else ``None``."""
        return next((token for token in self.placeholders if token in (text or "")), None)

    def check_lengths(self, requests: list[Request], image_kind: str) -> None:
        """Refuse an input over ``max_model_len`` (a text only when it was not cut), naming it."""
        for request in requests:
            if request.num_tokens > self.max_len:
                kind = "query" if request.image is None else image_kind
                raise InputValueError(request.index, f"the {kind} has {request.num_tokens} tokens, more than "
                                 f"max_model_len={self.max_len}" + ("; pass truncate=True" if request.image is None
                                                                    else "; raise max_model_len or shrink the image"))

    def preprocess(self, request: Request) -> None:
        """Decode the page (errors name the input) and lay it out as the processor does."""
        picture = load_image(request.image, request.index)
        encoded = self.processor.process_images([picture], return_tensors="pt")
        grid = tuple(int(x) for x in encoded["image_grid_thw"][0])
        request.token_ids = encoded["input_ids"][0].tolist()
        request.image = PagePixels(encoded["pixel_values"][0][: grid[0] * grid[1] * grid[2]].clone(), grid)
        request.vision_tokens = grid[0] * grid[1] * grid[2]  # the vision tower's rows: the scheduler counts them


@dataclass
class QueryPageBatch(ModelInput):
    """The packed tokens of a batch's queries and pages, plus the pages' patches ``pixel_patches [N, C*T*P*P]``,
    each patch's (row, column) ``patch_positions``, the patches' attention metadata (one sequence per frame) and
    where the merged patches go (``image_token_index``, into the packed tokens); for a windowed tower (Qwen2.5-VL)
    its ``vision_windows``."""

    pixel_patches: torch.Tensor | None = None
    patch_positions: torch.Tensor | None = None
    vision_metadata: Any = None
    vision_windows: Any = None
    image_token_index: torch.Tensor | None = None
    mrope_positions: torch.Tensor | None = None


class QueryPageBatchBuilder(FlatBatchBuilder):
    """The core's packed batch, and the pages' patches stacked in the order their pages are packed."""

    def __init__(self, pipeline, attention_backend) -> None:
        super().__init__(pipeline, attention_backend)
        config = vl_config(pipeline.model.config)
        self.image_token_id, self.merge = config.image_token_id, config.vision_config.spatial_merge_size
        self.video_token_id = getattr(config, "video_token_id", None)
        self.window_units = window_units(config.vision_config)

    def build(self, requests: list[Request]) -> QueryPageBatch:
        """Pack ``requests``; add the patches of those that are pages."""
        packed = super().build(requests)
        batch = QueryPageBatch(**{name: getattr(packed, name) for name in packed.__dataclass_fields__})
        pages = [page for r in requests for page in pages_of(r)]
        if pages:
            batch.pixel_patches = torch.cat([page.patches for page in pages])
            batch.patch_positions = patch_positions([page.grid for page in pages], self.merge)
            frames = [page.grid[1] * page.grid[2] for page in pages for _ in range(page.grid[0])]
            cu_seqlens = torch.zeros(len(frames) + 1, dtype=torch.int32)
            torch.cumsum(torch.tensor(frames), 0, out=cu_seqlens[1:])
            batch.vision_metadata = self.attention.build_metadata(frames, cu_seqlens, causal=False)
            if self.window_units is not None:
                batch.vision_windows = build_windows([page.grid for page in pages], self.merge, self.window_units,
                                                     self.attention)
            vision = batch.input_ids == self.image_token_id
            if self.video_token_id is not None:
                vision |= batch.input_ids == self.video_token_id
            batch.image_token_index = torch.nonzero(vision).flatten()
        return batch
