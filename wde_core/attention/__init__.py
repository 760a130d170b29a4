"""Attention backends: varlen attention over packed sequences, causal or bidirectional.

Every backend has ``build_metadata(seq_lens, cu_seqlens, causal)`` (once per batch, on the CPU) and
``forward(q, k, v, metadata, scale, window)`` (every layer; ``q`` ``[tokens, heads, head_dim]``, ``k``/``v``
``[tokens, kv_heads, head_dim]``; ``window``, for local layers: only keys that many positions either side).
This package imports nothing, so registering a backend imports no torch.
"""
