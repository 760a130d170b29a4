"""MPNet's relative position bias, described for the engine's attention backend (``BucketedBias``): T5's
bidirectional bucket rule over 32 buckets up to 128 positions, a ``[buckets, heads]`` table shared by every layer.
The backend builds it per sequence block (``eager``, ``torch_sdpa``) or adds it inside its kernel (``cpu_varlen``);
backends that take no bias (``flash_attn``, ``torch_varlen``) are never picked for MPNet (its link says
``position_bias=True``)."""

from __future__ import annotations

from torch import nn

from wde_core.plugin_api import BucketedBias

NUM_BUCKETS = 32  # HF's MPNetEncoder.compute_position_bias always buckets into 32, whatever the config says
MAX_DISTANCE = 128


class RelativePositionBias(nn.Module):
    """The ``[num_buckets, heads]`` table of HF's ``relative_attention_bias``; ``describe`` is what backends take."""

    def __init__(self, num_buckets: int, num_heads: int) -> None:
        super().__init__()
        if num_buckets < NUM_BUCKETS:
            raise ValueError(f"MPNet: relative_attention_num_buckets={num_buckets} is below the {NUM_BUCKETS} "
                             "buckets HF's MPNet computes")
        self.relative_attention_bias = nn.Embedding(num_buckets, num_heads)

    def describe(self) -> BucketedBias:
        """The bias as the attention contract takes it (the buckets HF computes: the first 32 rows)."""
        return BucketedBias(self.relative_attention_bias.weight[:NUM_BUCKETS], MAX_DISTANCE, bidirectional=True)


class BiasedAttention:
    """The engine's attention backend with the current batch's position bias passed to every layer's call."""

    def __init__(self, backend) -> None:
        self.backend = backend
        self.bias: BucketedBias | None = None

    def forward(self, q, k, v, metadata, scale: float | None = None, window: int | None = None):
        """The backend's attention of packed ``q``/``k``/``v`` with MPNet's bias; returns ``[T, heads, head_dim]``."""
        return self.backend.forward(q, k, v, metadata, scale, window, bias=self.bias)
