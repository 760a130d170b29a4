"""Attention backends: varlen attention over packed sequences, causal or bidirectional.

Every backend has the same two-method contract, so model code never branches on the backend:

* ``build_metadata(seq_lens, cu_seqlens, causal)`` runs once per batch on the CPU;
* ``forward(q, k, v, metadata, scale)`` runs in every layer, with ``q`` of shape
  ``[tokens, heads, head_dim]`` and ``k``/``v`` of shape ``[tokens, kv_heads, head_dim]``.

The metadata type is ``wde_core.attention.base.AttentionMetadata`` (also in ``wde_core.plugin_api``);
this package imports nothing, so registering a backend's import path never imports torch.
"""
