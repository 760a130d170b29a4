"""ColPali (``ColPaliForRetrieval``): PaliGemma's SigLIP vision tower (wde-images'), its linear projector and its Gemma
decoder (wde-gemma's), then a linear projection of every token's last state, L2-normalized: one vector per token,
scored by late interaction (MaxSim).

As transformers runs it: text tokens are embedded times ``sqrt(hidden_size)``, a page's ``<image>`` tokens take the
projected patches as they are; positions count from 1; attention is bidirectional over the whole sequence
(PaliGemma's prefix, which ``ColPaliProcessor``'s ``token_type_ids`` make every token of a query or page)."""

from __future__ import annotations

import torch
from torch import nn

from wde_core.plugin_api import Linear
from wde_gemma.public import GemmaEmbedder
from wde_images.public import VisionEncoder

_SKIPPED = ("lm_head.", "language_model.lm_head.")


class ColPali(nn.Module):
    """Packed texts and pages in, ``{"hidden": [T, H], "multi_vector": [T, dim]}`` out (the second when asked)."""

    def __init__(self, config, attention, settings=None) -> None:
        super().__init__()
        vlm = config.vlm_config
        self.vision_tower = VisionEncoder(vlm.vision_config, attention)  # the SigLIP vision tower alone
        self.multi_modal_projector = nn.Module()
        self.multi_modal_projector.linear = Linear(vlm.vision_config.hidden_size, vlm.projection_dim)
        self.language_model = GemmaEmbedder(vlm.text_config, attention, settings)
        self.embedding_proj_layer = Linear(vlm.text_config.hidden_size, config.embedding_dim)

    def forward(self, model_input) -> dict[str, torch.Tensor]:
        """Token embeddings, the pages' projected patches put at their ``<image>`` tokens, then the decoder."""
        hidden = self.language_model.decode(self.embed_with_images(model_input), model_input)
        heads = {"hidden": hidden}
        if "multi_vector" in model_input.outputs:
            vectors = self.embedding_proj_layer(hidden).float()
            heads["multi_vector"] = vectors / vectors.norm(dim=-1, keepdim=True)
        return heads

    def embed_with_images(self, model_input) -> torch.Tensor:
        """``[T, H]``: scaled token embeddings; at the ``<image>`` tokens, each page's patches through the SigLIP tower
        (its post-layernormed states) and the projector."""
        ids, where = model_input.input_ids, model_input.image_token_index
        if model_input.pixel_values is None:
            return self.language_model.scaled_embeddings(ids)
        x = self.language_model.scaled_embeddings(ids.index_fill(0, where, 0))  # <image> may lie past the vocabulary
        patches = self.vision_tower.vision_model.patch_states(model_input)
        return x.index_copy(0, where, self.multi_modal_projector.linear(patches).to(x.dtype))

    def after_load_weights(self) -> None:
        """RoPE tables of the decoder (the SigLIP tower has none)."""
        self.vision_tower.after_load_weights()
        self.language_model.after_load_weights()

    def map_checkpoint_name(self, name: str):
        """``vlm.``'s vision tower, projector and language model (transformers 4's layout or 5's), the projection;
        ``None`` for the LM head."""
        name = name.removeprefix("vlm.").removeprefix("model.")
        if name.startswith(_SKIPPED):
            return None
        for prefix, part in (("vision_tower.", self.vision_tower), ("language_model.", self.language_model)):
            if name.startswith(prefix):
                mapped = part.map_checkpoint_name(name[len(prefix):])
                return None if mapped is None else (prefix + mapped[0], mapped[1])
        return name, None
