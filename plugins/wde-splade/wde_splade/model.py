"""SPLADE over wde-bert's encoder: ``BertForMaskedLM``'s MLM head on every token, ``log1p(relu(logits))`` (twice
``log1p`` for ``log1p_relu``), max or sum over each sequence; a Router's ``SparseStaticEmbedding`` routes look up
their static (IDF) weight of every token present, with no transformer pass when a batch holds only those."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from wde_bert.public import BertEncoder
from wde_core.plugin_api import Linear

TOKEN_CHUNK = 512  # tokens whose [chunk, vocab] logits exist at once (as SpladePooling's chunk_size)
VECTOR_OUTPUTS = ("dense", "sparse")  # both are the [B, vocab] vector; the output processor shapes them


class SpladeModel(BertEncoder):
    """``BertForMaskedLM`` + ``SpladePooling``: forward returns the hidden states and, for the outputs asked, the
    ``[B, vocab]`` sparse-encoder vectors (ModelInput ``routes``: -1 for the MLM, else a static route's index)."""

    supports_tensor_parallel = False

    def __init__(self, config, attention, settings=None) -> None:
        super().__init__(config, attention, settings)
        layout = settings.extras["splade"]
        self.pooling, self.activation = layout["pooling"], layout["activation"]
        self.static_folders = list(layout["static_routes"].values())
        self.vocab_size = config.vocab_size
        self.transform = Linear(config.hidden_size, config.hidden_size, activation=config.hidden_act)
        self.transform_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.decoder_bias = nn.Parameter(torch.empty(config.vocab_size))
        self.tied = getattr(config, "tie_word_embeddings", True)
        if not self.tied:
            self.decoder_weight = nn.Parameter(torch.empty(config.vocab_size, config.hidden_size))

    def after_load_weights(self) -> None:
        """Load the static routes' weights ``[routes, vocab]`` (float32, as SparseStaticEmbedding keeps them)."""
        from safetensors.torch import load_file

        device = self.decoder_bias.device
        weights = [load_file(str(Path(folder) / "model.safetensors"))["weight"].float() for folder in self.static_folders]
        self.static_weights = torch.stack(weights).to(device) if weights else None

    def map_checkpoint_name(self, name: str):
        """BERT's names, plus the MLM head's ``cls.predictions.*`` (the decoder tied to the word embeddings)."""
        if not name.startswith("cls.predictions."):
            return super().map_checkpoint_name(name)
        name = name.removeprefix("cls.predictions.").replace(".gamma", ".weight").replace(".beta", ".bias")
        names = {"bias": "decoder_bias", "decoder.bias": "decoder_bias",
                 "decoder.weight": None if self.tied else "decoder_weight"}
        if name in names:
            return None if names[name] is None else (names[name], None)
        name = name.replace("transform.dense.", "transform.").replace("transform.LayerNorm.", "transform_norm.")
        return name, None

    def forward(self, model_input) -> dict[str, torch.Tensor]:
        """Hidden states ``[T, H]`` (empty when every sequence takes a static route) and the vectors asked for."""
        routes = getattr(model_input, "routes", None)
        static_only = routes is not None and bool((routes >= 0).all())
        if static_only:
            hidden = model_input.input_ids.new_zeros((0, self.hidden_size), dtype=self.decoder_bias.dtype)
        else:
            hidden = super().forward(model_input)
        heads = {"hidden": hidden}
        wanted = [name for name in VECTOR_OUTPUTS if name in model_input.outputs]
        if wanted:
            vectors = self.static_vectors(model_input, routes, None if static_only else self.splade(hidden, model_input))
            heads.update(dict.fromkeys(wanted, vectors))
        return heads

    def mlm_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """``BertOnlyMLMHead``: dense + activation, LayerNorm, then the (tied) decoder."""
        weight = self.embeddings.word_embeddings.weight if self.tied else self.decoder_weight
        return nn.functional.linear(self.transform_norm(self.transform(hidden)), weight, self.decoder_bias)

    def splade(self, hidden: torch.Tensor, model_input) -> torch.Tensor:
        """``SpladePooling``: per sequence, the max or sum over its tokens of the activated logits, float32."""
        lens = torch.as_tensor(model_input.seq_lens, device=hidden.device)
        seq_of_token = torch.repeat_interleave(torch.arange(len(lens), device=hidden.device), lens)
        out = torch.zeros(len(lens), self.vocab_size, device=hidden.device)
        for start in range(0, hidden.shape[0], TOKEN_CHUNK):
            activated = torch.log1p(torch.relu(self.mlm_logits(hidden[start:start + TOKEN_CHUNK]).float()))
            if self.activation == "log1p_relu":
                activated = torch.log1p(activated)
            index = seq_of_token[start:start + TOKEN_CHUNK]
            if self.pooling == "max":  # every value >= 0: a zero start is the max over the real tokens
                out.scatter_reduce_(0, index[:, None].expand_as(activated), activated, "amax")
            else:
                out.index_add_(0, index, activated)
        return out

    def static_vectors(self, model_input, routes, vectors: torch.Tensor | None) -> torch.Tensor:
        """``SparseStaticEmbedding``: a static route's rows hold the weight of every token present, else zero."""
        device = model_input.input_ids.device
        if vectors is None:
            vectors = torch.zeros(model_input.num_seqs, self.vocab_size, device=device)
        if routes is None or not bool((routes >= 0).any()):
            return vectors
        lens = torch.as_tensor(model_input.seq_lens, device=device)
        seq_of_token = torch.repeat_interleave(torch.arange(len(lens), device=device), lens)
        route_of_token = routes.to(device)[seq_of_token]
        static = route_of_token >= 0
        vectors[routes.to(device) >= 0] = 0
        ids, rows = model_input.input_ids[static], seq_of_token[static]
        vectors[rows, ids] = self.static_weights[route_of_token[static], ids]
        return vectors
