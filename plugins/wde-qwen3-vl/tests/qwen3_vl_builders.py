"""wde-qwen3-vl's test builder: a tiny random Qwen3-VL directory over the kit's Qwen2-VL tokenizer (imported by
name: pytest puts this tests folder on ``sys.path``, as for every plugin's tests folder without ``__init__.py``)."""

from __future__ import annotations

from wde_plugin_kit.vision_language import qwen2_vl_config, randomize_norms

QWEN3_VL_VISION = dict(depth=3, hidden_size=32, intermediate_size=48, num_heads=2, out_hidden_size=64,
                       num_position_embeddings=16, deepstack_visual_indexes=[0, 2], patch_size=16,
                       spatial_merge_size=2, temporal_patch_size=2, in_channels=3)
QWEN3_VL_TEXT = dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16, intermediate_size=96,
                     num_hidden_layers=3, max_position_embeddings=512,
                     rope_parameters={"rope_type": "default", "mrope_section": [2, 3, 3], "mrope_interleaved": True,
                                      "rope_theta": 10000.0})


def save_random_qwen3_vl(directory, seed: int = 0, *, max_pixels: int = 20 * 32 * 32, text: dict | None = None,
                         vision: dict | None = None, extra_tokens=(), tie_word_embeddings: bool = False):
    """A random ``Qwen3VLForConditionalGeneration`` (3 vision blocks of patches of 16 px, a 4 x 4 learned position
    grid, deepstack from blocks 0 and 2 into decoder layers 0 and 1 of 3; q/k-normed Qwen3 decoder, GQA, interleaved
    M-RoPE sections [2, 3, 3]) over :func:`qwen2_vl_config`'s tokenizer, saved with a ``Qwen2VLImageProcessor`` at
    Qwen3-VL's settings (16 px patches, mean and std 0.5; 4 merged patches an image up to ``max_pixels``);
    ``extra_tokens`` join the tokenizer (a reranker's "yes" and "no")."""
    import torch
    from transformers import Qwen2VLImageProcessor, Qwen3VLConfig, Qwen3VLForConditionalGeneration

    tokenizer, base = qwen2_vl_config(directory, extra_tokens=extra_tokens)
    config = Qwen3VLConfig(text_config={**QWEN3_VL_TEXT, "vocab_size": len(tokenizer), **(text or {})},
                           vision_config={**QWEN3_VL_VISION, **(vision or {})}, image_token_id=base.image_token_id,
                           video_token_id=base.video_token_id, vision_start_token_id=base.vision_start_token_id,
                           vision_end_token_id=tokenizer.convert_tokens_to_ids("<|vision_end|>"),
                           tie_word_embeddings=tie_word_embeddings)
    torch.manual_seed(seed)
    model = Qwen3VLForConditionalGeneration(config).eval()
    randomize_norms(model, seed)
    with torch.no_grad():  # HF starts the learned positions at std 0.02: make them weigh as much as the patches
        model.model.visual.pos_embed.weight.normal_(0, 0.5)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    Qwen2VLImageProcessor(patch_size=16, min_pixels=4 * 32 * 32, max_pixels=max_pixels, image_mean=[0.5] * 3,
                          image_std=[0.5] * 3).save_pretrained(directory)
    return directory
