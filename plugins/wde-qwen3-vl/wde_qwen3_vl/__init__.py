"""wde-qwen3-vl: Qwen3-VL single-vector embedders (vision tower with deepstack, Qwen3 decoder, interleaved M-RoPE)."""
