"""Embedding encodings: base64 float32, and the quantized types of Cohere's API.

``binary``/``ubinary`` pack sign bits and ``int8``/``uint8`` bucket each dimension over a calibrated
range, byte for byte as sentence-transformers' ``quantize_embeddings`` does.
"""

from __future__ import annotations

import base64

import numpy as np

from wde_server.errors import ApiError


def to_base64(vector: np.ndarray) -> str:
    """Base64 of the little-endian float32 bytes (what OpenAI's ``encoding_format="base64"`` returns)."""
    return base64.b64encode(np.ascontiguousarray(vector, dtype="<f4").tobytes()).decode("ascii")


def quantize(vectors: np.ndarray, precision: str, ranges: np.ndarray | None) -> np.ndarray:
    """``vectors`` as ``int8``/``uint8`` (with per-dimension ``ranges`` ``[2, dim]``) or ``binary``/``ubinary``."""
    if precision in ("binary", "ubinary"):
        packed = np.packbits(vectors > 0, axis=-1)
        return (packed - 128).astype(np.int8) if precision == "binary" else packed
    if ranges is None:
        raise ApiError(400, f"embedding_types: {precision!r} needs calibration ranges; start the server with "
                            "--calibration FILE (texts like the ones you will embed) to enable int8 and uint8",
                       param="embedding_types")
    ranges = ranges[:, :vectors.shape[-1]].astype(np.float32)
    starts = ranges[0]
    steps = (ranges[1] - starts) / 255
    steps = np.where(steps == 0, 1, steps)
    buckets = np.clip(np.floor((vectors - starts) / steps), 0, 255)
    return buckets.astype(np.uint8) if precision == "uint8" else (buckets - 128).astype(np.int8)


MULTI_VECTOR_TYPES = ("multi_vector", "multi_vector_base64")  # wde's embedding_types for every token's vector


def by_type(vectors: np.ndarray | None, types: list[str], ranges: np.ndarray | None,
            token_vectors: list[np.ndarray] | None = None) -> dict[str, list]:
    """Cohere's ``embeddings`` object: one list per requested type; ``multi_vector`` (``[tokens, dim]`` float lists)
    and ``multi_vector_base64`` (each input's matrix as one string of row-major little-endian float32) from
    ``token_vectors``."""
    out: dict[str, list] = {}
    for kind in dict.fromkeys(types):
        if kind == "float":
            out[kind] = vectors.tolist()
        elif kind == "base64":
            out[kind] = [to_base64(v) for v in vectors]
        elif kind == "multi_vector":
            out[kind] = [matrix.tolist() for matrix in token_vectors]
        elif kind == "multi_vector_base64":
            out[kind] = [to_base64(matrix) for matrix in token_vectors]
        else:
            out[kind] = quantize(vectors, kind, ranges).tolist()
    return out
