"""Sentence-transformers ``Dense`` modules after pooling (LaBSE's tanh projection, EmbeddingGemma's two
projections): ``act(W x + b)``, plus the input (or its projection) with ``use_residual``, in float32."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

ACTIVATIONS = {"Identity": nn.Identity, "Tanh": nn.Tanh, "ReLU": nn.ReLU, "GELU": nn.GELU, "Sigmoid": nn.Sigmoid,
               "SiLU": nn.SiLU}


class DenseModule(nn.Module):
    """One ST ``Dense`` module, built from its ``config.json`` as read by :mod:`wde_core.assembly.model_files`."""

    def __init__(self, spec: dict) -> None:
        super().__init__()
        n_in, n_out = spec["in_features"], spec["out_features"]
        self.linear = nn.Linear(n_in, n_out, bias=spec.get("bias", True))
        self.activation = ACTIVATIONS[spec["activation_function"]]()
        self.use_residual = bool(spec.get("use_residual", False))
        if self.use_residual and n_in != n_out:
            self.residual = nn.Linear(n_in, n_out, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.activation(self.linear(x))
        return out + (self.residual(x) if hasattr(self, "residual") else x) if self.use_residual else out


def load_dense_modules(specs: list[dict], device: torch.device) -> nn.Sequential | None:
    """The model's ``Dense`` modules in order, weights loaded (``None`` when it has none)."""
    if not specs:
        return None
    modules = []
    for spec in specs:
        module = DenseModule(spec)
        module.load_state_dict(_read_weights(Path(spec["path"])), strict=True)
        modules.append(module)
    return nn.Sequential(*modules).to(device=device, dtype=torch.float32).eval().requires_grad_(False)


def _read_weights(directory: Path) -> dict[str, torch.Tensor]:
    if (directory / "model.safetensors").is_file():
        from safetensors.torch import load_file

        return load_file(str(directory / "model.safetensors"))
    if (directory / "pytorch_model.bin").is_file():
        return torch.load(directory / "pytorch_model.bin", map_location="cpu", weights_only=True)
    raise FileNotFoundError(f"{directory}: a Dense module without model.safetensors or pytorch_model.bin")
