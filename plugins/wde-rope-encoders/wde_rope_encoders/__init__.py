"""wde plugin: post-norm encoders with rotary positions and gated feed-forwards (NomicBert, GTE v2)."""
