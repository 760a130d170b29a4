"""The CLIP/SigLIP vision transformer over packed images, as CLIP's, SigLIP's and SigLIP 2's vision towers and the
vision-language models reusing them (PaliGemma's SigLIP) run it: pre-norm transformer layers with fused QKV and wde's
varlen attention (``Encoder``, also the CLIP/SigLIP text tower's), patches as a sequence (CLIP: a class token, pre- and
post-norm; SigLIP: no class token, an attention-pooling head; SigLIP 2: each image its own patch grid)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from wde_core.plugin_api import Linear

QUICK_GELU = 1.702  # quick_gelu(x) = x * sigmoid(1.702 x)


class EncoderLayer(nn.Module):
    """``x + attn(norm1(x))``, then ``x + fc2(act(fc1(norm2(x))))``, over packed tokens ``[T, H]``."""

    def __init__(self, config, attention) -> None:
        super().__init__()
        hidden = config.hidden_size
        self.num_heads, self.head_dim = config.num_attention_heads, hidden // config.num_attention_heads
        self.attention = attention
        self.layer_norm1 = nn.LayerNorm(hidden, eps=config.layer_norm_eps)
        self.qkv = Linear(hidden, 3 * hidden)
        self.out_proj = Linear(hidden, hidden)
        self.layer_norm2 = nn.LayerNorm(hidden, eps=config.layer_norm_eps)
        # CLIP's quick_gelu(x) = x * sigmoid(1.702 x) = silu(1.702 x) / 1.702: fc1 scaled by 1.702 and fc2 by 1 / 1.702
        # once the weights are loaded (fold_quick_gelu), so the activation fuses into fc1's matrix product on CPU
        self.quick_gelu = config.hidden_act == "quick_gelu"
        self.fc1 = Linear(hidden, config.intermediate_size, activation="silu" if self.quick_gelu else config.hidden_act)
        self.fc2 = Linear(config.intermediate_size, hidden)

    def fold_quick_gelu(self) -> None:
        """Scale fc1 by 1.702 and fc2 by 1 / 1.702 (loaded weights), making silu in fc1 CLIP's quick_gelu."""
        if self.quick_gelu:
            self.fc1.weight.data.mul_(QUICK_GELU)
            self.fc1.bias.data.mul_(QUICK_GELU)
            self.fc2.weight.data.div_(QUICK_GELU)

    def forward(self, x: torch.Tensor, attn_metadata) -> torch.Tensor:
        """One layer over ``x [T, H]``."""
        tokens = x.shape[0]
        q, k, v = self.qkv(self.layer_norm1(x)).view(tokens, 3, self.num_heads, self.head_dim).unbind(1)
        x = self.out_proj(self.attention.forward(q, k, v, attn_metadata).reshape(tokens, -1), residual=x)
        return self.fc2(self.fc1(self.layer_norm2(x)), residual=x)


class Encoder(nn.Module):
    """A stack of :class:`EncoderLayer`."""

    def __init__(self, config, attention) -> None:
        super().__init__()
        self.layers = nn.ModuleList(EncoderLayer(config, attention) for _ in range(config.num_hidden_layers))

    def forward(self, x: torch.Tensor, attn_metadata) -> torch.Tensor:
        """All layers over ``x [T, H]``."""
        for layer in self.layers:
            x = layer(x, attn_metadata)
        return x


class VisionEmbeddings(nn.Module):
    """Patch embedding (a strided convolution, as a matrix product over unfolded patches), an optional class
    token, and position embeddings."""

    def __init__(self, config, *, class_token: bool) -> None:
        super().__init__()
        self.patch = config.patch_size
        grid = config.image_size // config.patch_size
        self.class_embedding = nn.Parameter(torch.empty(config.hidden_size)) if class_token else None
        self.patch_embedding = nn.Conv2d(config.num_channels, config.hidden_size, self.patch, self.patch,
                                         bias=not class_token)
        self.position_embedding = nn.Embedding(grid * grid + int(class_token), config.hidden_size)

    def forward(self, batch) -> torch.Tensor:
        """``pixel_values [images, C, S, S]`` -> ``[images * tokens, H]``, each image's tokens contiguous."""
        p, weight = self.patch, self.patch_embedding.weight
        patches = F.unfold(batch.pixel_values.to(weight.dtype), p, stride=p).transpose(1, 2)  # [N, patches, C*p*p]
        x = F.linear(patches, weight.flatten(1), self.patch_embedding.bias)
        if self.class_embedding is not None:
            x = torch.cat((self.class_embedding.expand(x.shape[0], 1, -1), x), dim=1)
        return (x + self.position_embedding.weight).flatten(0, 1)


class FlexibleGridEmbeddings(nn.Module):
    """SigLIP 2 (NaFlex): each image is its own ``h x w`` grid of flattened patches; the square grid of position
    embeddings is resized to it (bilinear with antialiasing, as transformers does)."""

    def __init__(self, config) -> None:
        super().__init__()
        self.patch_embedding = nn.Linear(config.num_channels * config.patch_size ** 2, config.hidden_size)
        self.position_embedding = nn.Embedding(config.num_patches, config.hidden_size)
        self.side = int(config.num_patches ** 0.5)

    def forward(self, batch) -> torch.Tensor:
        """``pixel_values [patches, C*p*p]`` of images with grids ``spatial_shapes`` -> ``[patches, H]``."""
        weight = self.patch_embedding.weight
        x = self.patch_embedding(batch.pixel_values.to(weight.dtype))
        grid = self.position_embedding.weight.float().reshape(self.side, self.side, -1).permute(2, 0, 1)[None]
        positions = [F.interpolate(grid, size=(h, w), mode="bilinear", align_corners=False, antialias=True)[0]
                     .flatten(1).T for h, w in batch.spatial_shapes.tolist()]
        return x + torch.cat(positions).to(x.dtype)


class AttentionPoolingHead(nn.Module):
    """SigLIP's head: a learned probe attends over each image's tokens, then LayerNorm + MLP with a residual."""

    def __init__(self, config) -> None:
        super().__init__()
        hidden = config.hidden_size
        self.probe = nn.Parameter(torch.empty(1, 1, hidden))
        self.attention = nn.MultiheadAttention(hidden, config.num_attention_heads, batch_first=True)
        self.layernorm = nn.LayerNorm(hidden, eps=config.layer_norm_eps)
        self.fc1 = Linear(hidden, config.intermediate_size, activation=config.hidden_act)
        self.fc2 = Linear(config.intermediate_size, hidden)

    def forward(self, x: torch.Tensor, lens: list[int]) -> torch.Tensor:
        """``[tokens, H]`` of images ``lens`` tokens long -> ``[images, H]``."""
        if len(set(lens)) == 1:
            padded, ignored = x.view(len(lens), lens[0], x.shape[-1]), None
        else:
            padded = nn.utils.rnn.pad_sequence(list(x.split(lens)), batch_first=True)
            lengths = torch.tensor(lens, device=x.device)
            ignored = torch.arange(padded.shape[1], device=x.device)[None, :] >= lengths[:, None]
        probe = self.probe.expand(len(lens), -1, -1)
        pooled = self.attention(probe, padded, padded, key_padding_mask=ignored, need_weights=False)[0][:, 0]
        return self.fc2(self.fc1(self.layernorm(pooled)), residual=pooled)


class VisionTower(nn.Module):
    """The vision transformer: one pooled vector per image (CLIP: the normed class token; SigLIP: the head)."""

    def __init__(self, config, attention, *, siglip: bool, naflex: bool = False) -> None:
        super().__init__()
        self.siglip = siglip
        self.embeddings = FlexibleGridEmbeddings(config) if naflex else VisionEmbeddings(config, class_token=not siglip)
        self.pre_layrnorm = None if siglip else nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.encoder = Encoder(config, attention)
        self.post_layernorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.head = AttentionPoolingHead(config) if siglip and getattr(config, "vision_use_head", True) else None

    def patch_states(self, batch) -> torch.Tensor:
        """Every token's last state ``[images * tokens, H]`` (SigLIP: after ``post_layernorm``, as its
        ``last_hidden_state``), from ``pixel_values`` and ``image_metadata``: what a vision-language model reads."""
        x = self.embeddings(batch)
        if self.pre_layrnorm is not None:
            x = self.pre_layrnorm(x)
        x = self.encoder(x, batch.image_metadata)
        return self.post_layernorm(x) if self.siglip else x

    def forward(self, batch) -> torch.Tensor:
        """``[images, H]`` from a batch's preprocessed images (``pixel_values``, ``image_lens``, metadata)."""
        x = self.patch_states(batch)
        if self.head is not None:
            return self.head(x, batch.image_lens)
        firsts = batch.image_starts
        return x.index_select(0, firsts) if self.siglip else self.post_layernorm(x.index_select(0, firsts))


def fold_quick_gelu(model: nn.Module) -> None:
    """Fold CLIP's quick_gelu into every :class:`EncoderLayer`'s loaded weights (see ``EncoderLayer.fold_quick_gelu``)."""
    for module in model.modules():
        if isinstance(module, EncoderLayer):
            module.fold_quick_gelu()
