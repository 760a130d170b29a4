"""Attention backends: varlen attention over packed sequences, causal or bidirectional.

Every backend has ``build_metadata(seq_lens, cu_seqlens, causal)`` (once per batch, on the CPU) and
``forward(q, k, v, metadata, scale, window, bias)`` (every layer; ``q`` ``[tokens, heads, head_dim]``, ``k``/``v``
``[tokens, kv_heads, head_dim]``; ``window``, for local layers: only keys that many positions either side;
``bias``: a position bias, described (``bias.py``), added to the scaled scores by backends with
``supports_position_bias``: ``eager``, ``torch_sdpa``, ``cpu_varlen``; never ``flash_attn`` or ``torch_varlen``).
This package imports nothing, so registering a backend imports no torch.
"""
