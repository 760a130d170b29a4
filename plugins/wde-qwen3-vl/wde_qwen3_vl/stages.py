"""The ``qwen3-vl`` batch builder: wde-vision-language's text/image batch (packed tokens, the images' patches and grids'
attention metadata, each token's M-RoPE positions, which Qwen3-VL's ``get_rope_index`` gives images alike) plus the
taps and weights that interpolate Qwen3-VL's learned position-embedding grid to each image's patches."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from wde_vision_language.public import QueryPageBatch, VisionTextBatchBuilder, pages_of, patch_positions


def position_taps(grids: list[tuple[int, int, int]], merge: int, side: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(taps [N, 4], weights [N, 4])``: for each patch (in the processor's order, frames after frames) the four rows
    of a ``side x side`` learned grid around its place and their bilinear weights (corners aligned: an image's first
    and last patch rows and columns sit on the grid's), as transformers' ``Qwen3VLVisionModel`` resamples its
    ``pos_embed``."""
    where = patch_positions(grids, merge).float()
    sizes = torch.cat([torch.tensor([[h, w]], dtype=torch.float).expand(t * h * w, 2) for t, h, w in grids])
    source = where * (side - 1) / (sizes - 1).clamp(min=1)
    floor = source.floor()
    offsets = torch.arange(2)
    taps = (floor.long()[..., None] + offsets).clamp(0, side - 1)  # [N, axis, 2]
    weights = (1 - (source[..., None] - floor[..., None] - offsets).abs()).clamp(min=0)
    index = (taps[:, 0, :, None] * side + taps[:, 1, None, :]).reshape(-1, 4)
    return index, (weights[:, 0, :, None] * weights[:, 1, None, :]).reshape(-1, 4)


@dataclass
class Qwen3VLBatch(QueryPageBatch):
    """A text/image batch plus ``position_taps`` and ``position_weights`` ``[patches, 4]`` (see
    :func:`position_taps`)."""

    position_taps: torch.Tensor | None = None
    position_weights: torch.Tensor | None = None


class Qwen3VLBatchBuilder(VisionTextBatchBuilder):
    """wde-vision-language's text/image batch with the images' position-embedding taps."""

    def __init__(self, pipeline, attention_backend) -> None:
        super().__init__(pipeline, attention_backend)
        self.side = int(pipeline.model.config.vision_config.num_position_embeddings ** 0.5)

    def build(self, requests) -> Qwen3VLBatch:
        """Pack ``requests`` as wde-vision-language does; add the taps of the images' patches, in the same order."""
        packed = super().build(requests)
        batch = Qwen3VLBatch(**{name: getattr(packed, name) for name in packed.__dataclass_fields__})
        grids = [page.grid for r in requests for page in pages_of(r)]
        if grids:
            batch.position_taps, batch.position_weights = position_taps(grids, self.merge, self.side)
        return batch
