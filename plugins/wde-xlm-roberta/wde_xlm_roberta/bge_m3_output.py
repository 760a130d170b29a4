"""bge-m3's output processor: per request, the outputs it asked for out of one forward pass.

* ``dense``: the pooled vector (CLS for bge-m3), dimensions and normalization as for any embedder;
* ``sparse``: ``{token_id: weight}``, special tokens (cls, eos, pad, unk) and zero weights dropped,
  the largest weight kept for a token that repeats (FlagEmbedding's ``_process_token_weights``);
* ``colbert``: ``[num_tokens - 1, dim]`` float32, one vector per token after the first, cut to
  ``dimensions`` and L2-normalized as the dense vector is (FlagEmbedding does the same).
"""

from __future__ import annotations

import numpy as np
import torch

from wde_core.plugin_api import EmbeddingOutputProcessor, Request, TokenEmbedOptions, split_tokens


class BgeM3OutputProcessor(EmbeddingOutputProcessor):
    """Serves ``output="dense"``, ``"sparse"``, ``"colbert"`` or any tuple of them (host side: the worker
    pooled the dense vector and passed the model's token-level heads through)."""

    outputs = ("dense", "sparse", "colbert")

    def __init__(self, pipeline) -> None:
        super().__init__(pipeline)
        tokenizer = pipeline.hf_tokenizer()
        special = (tokenizer.cls_token_id, tokenizer.eos_token_id, tokenizer.pad_token_id, tokenizer.unk_token_id)
        self.unused_tokens = np.array([t for t in special if t is not None], dtype=np.int64)

    def process(self, requests: list[Request], pooled: dict[str, torch.Tensor]) -> list[dict]:
        """Return one dict per request holding the outputs it asked for."""
        dense = pooled["dense"].numpy() if "dense" in pooled else None
        lengths = [r.num_tokens for r in requests]
        sparse = split_tokens(pooled.get("sparse"), lengths)
        colbert = split_tokens(pooled.get("colbert"), [n - 1 for n in lengths])
        tokens = split_tokens(pooled.get("tokens"), lengths)
        results: list = []
        for i, request in enumerate(requests):
            if isinstance(request.options, TokenEmbedOptions):
                results.append(self.token_vectors(tokens[i], request))
                continue
            wanted = request.options.output
            result = {"dense": self.finish(dense[i], request)} if "dense" in wanted else {}
            if "sparse" in wanted:
                result["sparse"] = self.lexical_weights(request.token_ids, sparse[i])
            if "colbert" in wanted:
                result["colbert"] = self.finish(colbert[i], request)
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
