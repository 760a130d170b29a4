"""Vision-language model directories for tests: tiny random Qwen2-VL / Qwen2.5-VL base models, ColQwen2, ColQwen2.5
and ColPali retrievers over the kit's byte-level BPE, saved with their processors, and Qwen-VL's chat framing."""

from __future__ import annotations

from wde_plugin_kit.decoders import write_decoder_tokenizer



# --- Qwen2-VL and ColQwen2 ---
QWEN2_VL_SPECIALS = ["<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>", "<|image_pad|>",
                     "<|video_pad|>", "<|endoftext|>"]


# A Qwen-VL-style chat template (as Qwen2-VL's and Qwen3-VL's render list contents): each turn "<|im_start|>{role}\n",
# an image as its vision placeholder, a text as itself, "<|im_end|>\n"; the assistant's header for a generation prompt.
QWEN_VL_CHAT_TEMPLATE = (
    "{%- for message in messages %}{{ '<|im_start|>' + message.role + '\\n' }}"
    "{%- if message.content is string %}{{ message.content }}{%- else %}{%- for part in message.content %}"
    "{%- if part.type == 'image' %}{{ '<|vision_start|><|image_pad|><|vision_end|>' }}"
    "{%- elif part.type == 'text' %}{{ part.text }}{%- endif %}{%- endfor %}{%- endif %}"
    "{{ '<|im_end|>\\n' }}{%- endfor %}{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{%- endif %}")


def chat_framed(instruction: str, text: str, image: bool) -> str:
    """The chat framing of Qwen3-VL-Embedding (its paper and scripts) and GME, written out by hand: the instruction
    as the system turn, the image's placeholder and the text as the user turn, the assistant's header."""
    vision = "<|vision_start|><|image_pad|><|vision_end|>" if image else ""
    return (f"<|im_start|>system\n{instruction}<|im_end|>\n<|im_start|>user\n{vision}{text}<|im_end|>\n"
            "<|im_start|>assistant\n")


def qwen2_vl_config(directory, *, text: dict | None = None, vision: dict | None = None, extra_tokens=()):
    """The tests' byte-level BPE saved to ``directory`` with the Qwen2-VL special tokens (and ``extra_tokens``)
    added, and a small ``Qwen2VLConfig`` over it (2 vision blocks, 2 decoder layers, GQA); ``text``/``vision``
    override its configs."""
    from transformers import AutoTokenizer, Qwen2VLConfig

    write_decoder_tokenizer(directory)
    tokenizer = AutoTokenizer.from_pretrained(directory)
    tokenizer.add_tokens(list(extra_tokens))
    tokenizer.add_special_tokens({"additional_special_tokens": QWEN2_VL_SPECIALS, "pad_token": "<|endoftext|>"})
    ids = {token: tokenizer.convert_tokens_to_ids(token) for token in QWEN2_VL_SPECIALS}
    config = Qwen2VLConfig(
        text_config={**dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, intermediate_size=96,
                            num_hidden_layers=2, vocab_size=len(tokenizer), max_position_embeddings=512,
                            rope_parameters={"rope_type": "default", "mrope_section": [2, 3, 3],
                                             "rope_theta": 10000.0}), **(text or {})},
        vision_config={**dict(depth=2, embed_dim=32, hidden_size=64, num_heads=2, mlp_ratio=2, patch_size=14,
                              spatial_merge_size=2, temporal_patch_size=2, in_channels=3), **(vision or {})},
        image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"])
    return tokenizer, config


def randomize_norms(model, seed: int):
    """Norm weights and biases start at 1 and 0: make them random too."""
    import torch

    torch.manual_seed(seed + 1)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith(("norm.weight", "norm1.weight", "norm2.weight", "ln_q.weight", ".bias")):
                param.add_(torch.randn_like(param) * 0.1)


def save_random_colqwen2(directory, seed: int = 0, *, text: dict | None = None, vision: dict | None = None,
                         embedding_dim: int = 16, max_pixels: int = 16 * 28 * 28):
    """A random ``ColQwen2ForRetrieval`` over :func:`qwen2_vl_config` and a ``Qwen2VLImageProcessor`` allowing 4
    merged patches an image up to ``max_pixels``, saved with their ``ColQwen2Processor``."""
    tokenizer, vlm = qwen2_vl_config(directory, text=text, vision=vision)
    return _save_colqwen2(directory, tokenizer, vlm, seed, embedding_dim, max_pixels)


def _save_colqwen2(directory, tokenizer, vlm, seed: int, embedding_dim: int, max_pixels: int):
    """A random ``ColQwen2ForRetrieval`` on ``vlm`` (a Qwen2-VL or Qwen2.5-VL config), saved with its
    ``ColQwen2Processor`` (4 merged patches an image up to ``max_pixels``)."""
    import torch
    from transformers import ColQwen2Config, ColQwen2ForRetrieval, ColQwen2Processor, Qwen2VLImageProcessor

    torch.manual_seed(seed)
    model = ColQwen2ForRetrieval(ColQwen2Config(vlm_config=vlm, embedding_dim=embedding_dim)).eval()
    randomize_norms(model, seed)
    model.save_pretrained(directory)
    processor = ColQwen2Processor(image_processor=Qwen2VLImageProcessor(min_pixels=4 * 28 * 28, max_pixels=max_pixels),
                                  tokenizer=tokenizer)
    processor.save_pretrained(directory)
    return directory


def save_random_qwen2_vl(directory, seed: int = 0, *, max_pixels: int = 16 * 28 * 28):
    """A random ``Qwen2VLForConditionalGeneration`` over :func:`qwen2_vl_config`, saved with its tokenizer and a
    ``Qwen2VLImageProcessor`` (4 merged patches an image up to ``max_pixels``). No ``Qwen2VLProcessor``: without
    torchvision transformers cannot make one (its video processor needs it)."""
    from transformers import Qwen2VLForConditionalGeneration

    tokenizer, config = qwen2_vl_config(directory)
    return _save_vl_model(directory, Qwen2VLForConditionalGeneration, tokenizer, config, seed, max_pixels)


def _save_vl_model(directory, model_class, tokenizer, config, seed: int, max_pixels: int):
    """A random ``model_class(config)`` (Qwen2-VL or Qwen2.5-VL), saved with its tokenizer and a
    ``Qwen2VLImageProcessor`` (4 merged patches an image up to ``max_pixels``)."""
    import torch
    from transformers import Qwen2VLImageProcessor

    torch.manual_seed(seed)
    model = model_class(config).eval()
    randomize_norms(model, seed)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    Qwen2VLImageProcessor(min_pixels=4 * 28 * 28, max_pixels=max_pixels).save_pretrained(directory)
    return directory




# --- ColPali (PaliGemma) ---
COLPALI_TEXT = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                    num_key_value_heads=1, head_dim=16, max_position_embeddings=512)
COLPALI_VISION = dict(hidden_size=48, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, patch_size=4,
                      image_size=30, vision_use_head=False)  # 30 px: a 7 x 7 grid, the last 2 pixel rows unused


def save_random_colpali(directory, seed: int = 0, *, text: dict | None = None, vision: dict | None = None,
                        embedding_dim: int = 16):
    """A random ``ColPaliForRetrieval`` (PaliGemma: a SigLIP tower, a Gemma decoder) with the tiny BPE as its
    tokenizer (``<bos>`` and ``<image>`` added) and a PIL ``SiglipImageProcessor``, saved with their
    ``ColPaliProcessor`` (which adds PaliGemma's location and segmentation tokens: the vocabulary is its length)."""
    import torch
    from transformers import (AutoTokenizer, ColPaliConfig, ColPaliForRetrieval, ColPaliProcessor, PaliGemmaConfig,
                              SiglipImageProcessorPil)

    directory.mkdir(parents=True, exist_ok=True)
    write_decoder_tokenizer(directory)
    tokenizer = AutoTokenizer.from_pretrained(directory)
    tokenizer.add_special_tokens({"bos_token": "<bos>", "additional_special_tokens": ["<image>"]})
    vision = {**COLPALI_VISION, **(vision or {})}
    images = SiglipImageProcessorPil(size={"height": vision["image_size"], "width": vision["image_size"]})
    images.image_seq_length = (vision["image_size"] // vision["patch_size"]) ** 2
    processor = ColPaliProcessor(image_processor=images, tokenizer=tokenizer)
    text = {**COLPALI_TEXT, **(text or {}), "vocab_size": len(tokenizer)}
    vlm = PaliGemmaConfig(vision_config=vision, text_config=text, image_token_index=processor.image_token_id,
                          vocab_size=len(tokenizer), projection_dim=text["hidden_size"], hidden_size=text["hidden_size"])
    torch.manual_seed(seed)
    model = ColPaliForRetrieval(ColPaliConfig(vlm_config=vlm, embedding_dim=embedding_dim)).eval()
    with torch.no_grad():  # HF starts Gemma's (1 + w) norm weights at zero, SigLIP's norms at 1 and biases at 0
        for name, param in model.named_parameters():
            if name.endswith(("norm.weight", "norm1.weight", "norm2.weight", ".bias")):
                param.add_(torch.randn_like(param) * 0.1)
    model.save_pretrained(directory)
    processor.save_pretrained(directory)
    return directory


# --- ColQwen2.5 / Qwen2.5-VL (the windowed tower) ---
QWEN2_5_VL_VISION = dict(depth=3, hidden_size=32, out_hidden_size=64, intermediate_size=48, num_heads=2,
                         window_size=56, fullatt_block_indexes=[1], patch_size=14, spatial_merge_size=2,
                         temporal_patch_size=2, in_channels=3)


def qwen2_5_vl_config(directory, *, text: dict | None = None, vision: dict | None = None):
    """:func:`qwen2_vl_config`'s tokenizer and decoder under a small ``Qwen2_5_VLConfig``: 3 vision blocks (RMSNorm,
    gated MLP), windows of 2x2 merged patches (56 px), full attention in block 1; ``text``/``vision`` override."""
    from transformers import Qwen2_5_VLConfig

    tokenizer, base = qwen2_vl_config(directory, text=text)
    decoder = {k: v for k, v in base.text_config.to_dict().items() if k != "model_type"}
    config = Qwen2_5_VLConfig(text_config=decoder, vision_config={**QWEN2_5_VL_VISION, **(vision or {})},
                              image_token_id=base.image_token_id, video_token_id=base.video_token_id,
                              vision_start_token_id=base.vision_start_token_id)
    return tokenizer, config


def save_random_colqwen2_5(directory, seed: int = 0, *, text: dict | None = None, vision: dict | None = None,
                           embedding_dim: int = 16, max_pixels: int = 48 * 28 * 28):
    """A random ``ColQwen2ForRetrieval`` on a Qwen2.5-VL backbone (:func:`qwen2_5_vl_config`: ColQwen2.5) and a
    ``Qwen2VLImageProcessor`` allowing 4 merged patches an image up to ``max_pixels``, with their
    ``ColQwen2Processor``."""
    tokenizer, vlm = qwen2_5_vl_config(directory, text=text, vision=vision)
    return _save_colqwen2(directory, tokenizer, vlm, seed, embedding_dim, max_pixels)


def save_random_qwen2_5_vl(directory, seed: int = 0, *, max_pixels: int = 48 * 28 * 28):
    """A random ``Qwen2_5_VLForConditionalGeneration`` over :func:`qwen2_5_vl_config`, saved with its tokenizer and a
    ``Qwen2VLImageProcessor`` (Qwen2.5-VL's too; 4 merged patches an image up to ``max_pixels``)."""
    from transformers import Qwen2_5_VLForConditionalGeneration

    tokenizer, config = qwen2_5_vl_config(directory)
    return _save_vl_model(directory, Qwen2_5_VLForConditionalGeneration, tokenizer, config, seed, max_pixels)
