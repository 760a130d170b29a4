"""wde plugin: decoder-only LLMs (Qwen2, Llama, Mistral) as embedders, causal or bidirectional."""
