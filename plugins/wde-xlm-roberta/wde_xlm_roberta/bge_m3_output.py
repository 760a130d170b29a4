"""bge-m3's output processor: per request, the outputs it asked for out of one forward pass.

* ``dense``: the pooled vector (CLS for bge-m3), dimensions and normalization as for any embedder;
* ``sparse``: ``{token_id: weight}``, special tokens (cls, eos, pad, unk) and zero weights dropped,
  the largest weight kept for a token that repeats (FlagEmbedding's ``_process_token_weights``);
* ``colbert``: ``[num_tokens - 1, dim]`` float32, one vector per token after the first, cut to
  ``dimensions`` and L2-normalized as the dense vector is (FlagEmbedding does the same).
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import torch

from wde_core.request import Request
from wde_core.stages.output import EmbeddingOutputProcessor
from wde_core.stages.pooling import POOLERS


class BgeM3OutputProcessor(EmbeddingOutputProcessor):
    """Serves ``output="dense"``, ``"sparse"``, ``"colbert"`` or any tuple of them."""

    outputs = ("dense", "sparse", "colbert")

    def __init__(self, pipeline) -> None:
        super().__init__(pipeline)
        tokenizer = pipeline.hf_tokenizer()
        special = (tokenizer.cls_token_id, tokenizer.eos_token_id, tokenizer.pad_token_id, tokenizer.unk_token_id)
        self.unused_tokens = np.array([t for t in special if t is not None], dtype=np.int64)

    def pooler(self) -> Callable:
        """Pool the dense vector on the device; pass the token-level heads through."""
        pool_dense = POOLERS[self.pooling]

        def pool(heads: dict[str, torch.Tensor], model_input) -> dict[str, torch.Tensor]:
            pooled = {name: heads[name].float() for name in ("sparse", "colbert") if name in heads}
            pooled["dense"] = pool_dense(heads["hidden"], model_input)
            return pooled

        return pool

    def process(self, requests: list[Request], pooled: dict[str, torch.Tensor]) -> list[dict]:
        """Return one dict per request holding the outputs it asked for."""
        dense = super().process(requests, pooled["dense"])
        lengths = [r.num_tokens for r in requests]
        sparse = _split(pooled.get("sparse"), lengths)
        colbert = _split(pooled.get("colbert"), [n - 1 for n in lengths])
        results = []
        for i, request in enumerate(requests):
            wanted = request.options.output
            result = {"dense": dense[i]} if "dense" in wanted else {}
            if "sparse" in wanted:
                result["sparse"] = self.lexical_weights(request.token_ids, sparse[i])
            if "colbert" in wanted:
                result["colbert"] = self.colbert_vectors(colbert[i], request)
            results.append(result)
        return results

    def lexical_weights(self, token_ids: list[int], weights: np.ndarray) -> dict[int, float]:
        """``{token_id: max weight}`` over the non-special tokens with a positive weight."""
        ids = np.asarray(token_ids, dtype=np.int64)
        keep = (weights > 0) & ~np.isin(ids, self.unused_tokens)
        ids, weights = ids[keep], weights[keep]
        order = np.lexsort((weights, ids))  # by id, then weight: each id's last entry is its max
        ids, weights = ids[order], weights[order]
        last = np.append(ids[1:] != ids[:-1], True) if len(ids) else np.zeros(0, dtype=bool)
        return dict(zip(ids[last].tolist(), weights[last].tolist()))

    def colbert_vectors(self, vectors: np.ndarray, request: Request) -> np.ndarray:
        """The request's ColBERT vectors, cut to ``dimensions`` and normalized as its dense vector is."""
        options = request.options
        if options.dimensions is not None:
            vectors = vectors[:, : options.dimensions]
        normalize = self.normalize if options.normalize is None else options.normalize
        if normalize:
            vectors = torch.nn.functional.normalize(torch.from_numpy(vectors), dim=-1).numpy()
        return vectors.astype(np.float32, copy=False)


def _split(tensor: torch.Tensor | None, lengths: list[int]) -> list[np.ndarray | None]:
    if tensor is None:
        return [None] * len(lengths)
    return list(np.split(tensor.numpy(), np.cumsum(lengths)[:-1]))
