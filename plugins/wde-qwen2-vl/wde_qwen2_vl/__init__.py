"""wde-qwen2-vl: Qwen2-VL's vision tower and ColQwen2 late-interaction retrieval on wde."""
