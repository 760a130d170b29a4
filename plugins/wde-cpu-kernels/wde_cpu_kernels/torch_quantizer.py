"""torch's own ops for ``int8.py``'s quantization, where the compiled module (either build) is not loaded: slower (a
widened copy and a quantized tensor), the same results (the compiled kernels are tested against these)."""

from __future__ import annotations

import torch

QMAX = 127.0
ZERO_POINT = 128  # activations go to oneDNN as uint8: the symmetric int8 value + 128 (as int8 where AMX-INT8 is)


def activation_scale(rows: torch.Tensor, factor: float) -> tuple[float, torch.Tensor]:
    """The int8 scale of ``rows`` (the largest magnitude of the ordinary rows / 127) and the outlier rows: those
    whose largest magnitude is over ``factor`` times the median row's (BERT's special tokens carry 3-8x; with 2,
    2.5% of all-MiniLM-L6-v2's QKV inputs and 10% of its FFN inputs). In torch ops, for the fallback: the compiled
    ``quantize_batch_uint8`` does this, and the quantization, in one call."""
    magnitudes = TorchQuantizer.row_absmax(rows)
    outlying = magnitudes > factor * magnitudes.median()
    ordinary = magnitudes.masked_fill(outlying, 0.0) if bool(outlying.any()) else magnitudes
    return max(float(ordinary.max()), 1e-8) / QMAX, outlying.nonzero().flatten()


class TorchQuantizer:
    """torch's own ops where the compiled kernels are not loaded (slower: a widened copy and a quantized tensor)."""

    @staticmethod
    def row_absmax(rows: torch.Tensor) -> torch.Tensor:
        return rows.abs().amax(dim=1).float()

    @staticmethod
    def quantize_uint8(rows: torch.Tensor, scale: float, int8: bool = False) -> torch.Tensor:
        if int8:
            return torch.quantize_per_tensor(rows.float(), scale, 0, torch.qint8).int_repr()
        return torch.quantize_per_tensor(rows.float(), scale, ZERO_POINT, torch.quint8).int_repr()

    @staticmethod
    def quantize_batch_uint8(rows: torch.Tensor, factor: float, int8: bool = False,
                             row_multiple: int = 1) -> tuple[torch.Tensor, float, torch.Tensor]:
        scale, outliers = activation_scale(rows, factor)
        quantized = TorchQuantizer.quantize_uint8(rows, scale, int8)
        return TorchQuantizer.padded(quantized, row_multiple, 0 if int8 else ZERO_POINT), scale, outliers

    @staticmethod
    def quantize_rows_uint8(rows: torch.Tensor, int8: bool = False,
                            row_multiple: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
        scales = rows.abs().amax(dim=1).float().clamp(min=1e-8) / QMAX
        quantized = torch.round(rows.float() / scales[:, None]).clamp(-QMAX - 1, QMAX)
        quantized = quantized.to(torch.int8) if int8 else (quantized + ZERO_POINT).to(torch.uint8)
        return TorchQuantizer.padded(quantized, row_multiple, 0 if int8 else ZERO_POINT), scales

    @staticmethod
    def padded(quantized: torch.Tensor, row_multiple: int, zero: int) -> torch.Tensor:
        """``quantized`` with rows of the zero point appended up to a multiple of ``row_multiple``."""
        extra = -len(quantized) % row_multiple
        return torch.cat([quantized, quantized.new_full((extra, quantized.shape[1]), zero)]) if extra else quantized

    @staticmethod
    def dequantize_rows(products, scales, bias, residual, bfloat16: bool) -> torch.Tensor:
        y = products * scales[:, None] + (0.0 if bias is None else bias)
        y = y if residual is None else y + residual.reshape(y.shape).float()
        return y.to(torch.bfloat16 if bfloat16 else torch.float32)
