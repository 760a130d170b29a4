"""bge-m3: an ``XLMRobertaModel`` with ``colbert_linear.pt`` and ``sparse_linear.pt`` beside it.

The heads follow FlagEmbedding's ``BGEM3FlagModel``: sparse weights are ``relu(sparse_linear(h))``
per token; ColBERT vectors are ``colbert_linear(h)`` for every token after the first.
"""

from __future__ import annotations

import torch

from wde_core.plugin_api import Linear
from wde_xlm_roberta.model import XLMRobertaEncoder

HEAD_FILES = {"colbert_linear.pt": "colbert_linear.", "sparse_linear.pt": "sparse_linear."}


def has_bge_m3_heads(directory) -> str | None:
    """The matcher of the bge-m3 variant: both head files sit beside the checkpoint."""
    if all((directory.path / name).is_file() for name in HEAD_FILES):
        return "colbert_linear.pt and sparse_linear.pt present"
    return None


class BgeM3Model(XLMRobertaEncoder):
    """The XLM-R encoder plus bge-m3's sparse and ColBERT heads, run only when a batch asks."""

    takes_padding_rows = True  # the core's CPU row padding (ModelInput.padding), dropped by the trunk's forward

    extra_checkpoint_files = HEAD_FILES

    def __init__(self, config, attention, settings=None) -> None:
        super().__init__(config, attention, settings)
        colbert_dim = getattr(config, "colbert_dim", -1)
        colbert_dim = config.hidden_size if colbert_dim in (None, -1) else colbert_dim
        self.colbert_linear = Linear(config.hidden_size, colbert_dim)
        self.sparse_linear = Linear(config.hidden_size, 1)

    def forward(self, model_input) -> dict[str, torch.Tensor]:
        """Token states as ``hidden``, plus ``sparse`` ``[T]`` and ``colbert`` ``[T - B, dim]`` if asked."""
        hidden = super().forward(model_input)
        heads = {"hidden": hidden}
        if "sparse" in model_input.outputs:
            heads["sparse"] = torch.relu(self.sparse_linear(hidden)).squeeze(-1)
        if "colbert" in model_input.outputs:
            not_first = torch.ones(hidden.shape[0], dtype=torch.bool, device=hidden.device)
            not_first[model_input.cu_seqlens[:-1].long()] = False
            heads["colbert"] = self.colbert_linear(hidden[not_first])
        return heads
