"""Pooling over packed sequences, on the model's device: CLS, mean, last token, max."""

from __future__ import annotations

import torch

from wde_core.assembly.engine_args import POOLINGS
from wde_core.stages.model_input import ModelInput


def _segments(model_input: ModelInput, hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Return the sequence index of every pooled token and the pooled-token mask."""
    lens = torch.as_tensor(model_input.seq_lens, device=hidden.device)
    seq_of_token = torch.repeat_interleave(torch.arange(len(lens), device=hidden.device), lens)
    token_index = torch.arange(hidden.shape[0], device=hidden.device)
    pooled = token_index >= model_input.pool_start[seq_of_token]
    return seq_of_token, pooled


def pool_cls(hidden: torch.Tensor, model_input: ModelInput) -> torch.Tensor:
    """The first token of each sequence."""
    return hidden.index_select(0, model_input.cu_seqlens[:-1].long())


def pool_last(hidden: torch.Tensor, model_input: ModelInput) -> torch.Tensor:
    """The last real token of each sequence."""
    return hidden.index_select(0, model_input.cu_seqlens[1:].long() - 1)


def pool_mean(hidden: torch.Tensor, model_input: ModelInput) -> torch.Tensor:
    """The mean of each sequence's tokens (after an excluded prompt), in float32: one ``[B, T] @ [T, H]``
    product with each sequence's averaging weights (faster on CPU than a scatter over the tokens)."""
    tokens = torch.arange(hidden.shape[0], device=hidden.device)
    start, stop = model_input.pool_start.to(hidden.device), model_input.cu_seqlens[1:].to(hidden.device).long()
    inside = (tokens[None, :] >= start[:, None]) & (tokens[None, :] < stop[:, None])
    weights = inside.float() / (stop - start).clamp(min=1)[:, None].float()
    return weights @ hidden.float()


def pool_max(hidden: torch.Tensor, model_input: ModelInput) -> torch.Tensor:
    """The element-wise maximum over each sequence's tokens."""
    seq_of_token, pooled = _segments(model_input, hidden)
    out = hidden.new_full((model_input.num_seqs, hidden.shape[1]), float("-inf"))
    index = seq_of_token[pooled][:, None].expand(-1, hidden.shape[1])
    return out.scatter_reduce_(0, index, hidden[pooled], "amax")


POOLERS = dict(zip(POOLINGS, (pool_cls, pool_mean, pool_last, pool_max)))  # POOLINGS: the one list of names


ACTIVATIONS = {"sigmoid": torch.sigmoid, "identity": lambda logits: logits, "tanh": torch.tanh,
               "softmax": lambda logits: torch.softmax(logits, dim=-1)}


class Pooler:
    """The device side of every task, run by the worker after the model's forward (as vLLM's pooler).

    From hidden states ``[T, H]`` (or a dict of them as ``"hidden"`` and token-level heads), a dict of float32
    tensors holding what the batch asked for: ``"tokens"``, the heads, and ``"dense"`` or, for a model with a
    ``head(pooled)`` method, ``"logits"`` and ``"scores"`` (their activation); ``dense`` is the model's
    sentence-transformers ``Dense`` modules, applied to the pooled vector."""

    def __init__(self, settings, model, dense=None) -> None:
        self.pool = POOLERS[settings.pooling]
        self.head = getattr(model, "head", None)
        self.dense = dense
        self.activation = ACTIVATIONS[settings.activation or "identity"]

    def __call__(self, output, model_input: ModelInput) -> dict[str, torch.Tensor]:
        """Pool one batch's model output on the device."""
        heads = dict(output) if isinstance(output, dict) else {"hidden": output}
        hidden = heads.pop("hidden")
        result = {name: tensor.float() for name, tensor in heads.items()}
        wanted = set(model_input.outputs) - set(heads)
        if "tokens" in wanted:
            result["tokens"] = hidden.float()
        if wanted - {"tokens"}:
            pooled = self.pool(hidden, model_input)
            if self.head is None:
                result["dense"] = pooled.float() if self.dense is None else self.dense(pooled.float())
            else:
                logits = self.head(pooled).float()
                result["logits"], result["scores"] = logits, self.activation(logits)
        return result
