"""Images and image-text model directories for tests: random PIL images of every mode wde converts, video frames,
and tiny random CLIP / SigLIP / SigLIP 2 directories with their tokenizer and image processor saved as the hub has them."""

from __future__ import annotations

import json
from pathlib import Path

from wde_plugin_kit.decoders import DECODER_VOCAB, decoder_bpe_json

CLIP_BOS, CLIP_EOS = "<|startoftext|>", "<|endoftext|>"
IMAGE_SIZE, PATCH = 30, 4  # 30 is not a multiple of 4: the patch grid is 7 x 7, the last 2 pixel rows/columns unused


def write_clip_tokenizer(directory: Path, family: str, max_length: int) -> tuple[int, int]:
    """The tiny BPE as the family's tokenizer: CLIP wraps a text in BOS/EOS; SigLIP appends EOS (and the
    processor pads to ``max_length``). Returns the BOS and EOS ids."""
    from tokenizers import Tokenizer, processors
    from transformers import PreTrainedTokenizerFast

    bpe = json.loads(decoder_bpe_json())
    bpe["model"]["vocab"]["<unk>"] = len(bpe["model"]["vocab"])  # SigLIP 2's tokenizer class (Gemma's) wants one
    tokenizer = Tokenizer.from_str(json.dumps(bpe))
    tokenizer.add_special_tokens([CLIP_BOS, "<pad>"])
    bos, eos = tokenizer.token_to_id(CLIP_BOS), tokenizer.token_to_id(CLIP_EOS)
    template = f"{CLIP_BOS} $A {CLIP_EOS}" if family == "clip" else f"$A {CLIP_EOS}"
    tokenizer.post_processor = processors.TemplateProcessing(single=template,
                                                             special_tokens=[(CLIP_BOS, bos), (CLIP_EOS, eos)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token=CLIP_BOS, eos_token=CLIP_EOS,
                                   pad_token="<pad>", model_max_length=max_length)
    fast.save_pretrained(directory)
    return bos, eos


def save_random_clip(directory: Path, family: str = "clip", *, seed: int = 0, half: str | None = None,
                     text_layers: int = 3, vision_layers: int = 2, image_size: int = IMAGE_SIZE,
                     projection_dim: int = 24, **vision) -> Path:
    """A random ``CLIPModel`` / ``SiglipModel`` / ``Siglip2Model`` (``half="vision"`` or ``"text"``: the
    ``...VisionModel`` / ``...TextModel`` half alone) with its tokenizer and image processor saved as the hub has them."""
    import torch
    import transformers

    directory.mkdir(parents=True, exist_ok=True)
    max_length = 77 if family == "clip" else 16
    bos, eos = write_clip_tokenizer(directory, family, max_length)
    text = dict(vocab_size=DECODER_VOCAB + 3, hidden_size=32, intermediate_size=37, num_hidden_layers=text_layers,
                num_attention_heads=4, max_position_embeddings=max_length, bos_token_id=bos, eos_token_id=eos,
                pad_token_id=eos)
    vision = dict(hidden_size=48, intermediate_size=64, num_hidden_layers=vision_layers, num_attention_heads=4,
                  patch_size=PATCH, **vision)
    vision.update(num_patches=16) if family == "siglip2" else vision.update(image_size=image_size)  # a 4 x 4 grid
    prefix = {"clip": "CLIP", "siglip": "Siglip", "siglip2": "Siglip2"}[family]
    extra = {"projection_dim": projection_dim} if family == "clip" else {}
    if family != "clip":  # SigLIP's text head projects into the vision tower's width
        text["projection_size"] = vision["hidden_size"]
    config = getattr(transformers, f"{prefix}Config")(text_config=text, vision_config=vision, **extra)
    torch.manual_seed(seed)
    if half is None:
        model = getattr(transformers, f"{prefix}Model")(config)
    else:
        part = config.vision_config if half == "vision" else config.text_config
        suffix = "ModelWithProjection" if family == "clip" else "Model"
        if family == "clip":
            part.projection_dim = projection_dim
        model = getattr(transformers, f"{prefix}{half.capitalize()}{suffix}")(part)
    with torch.no_grad():  # HF initializes norms to 1 and biases to 0: make them random too
        for name, param in model.named_parameters():
            if name.endswith(("norm.weight", "norm1.weight", "norm2.weight", ".bias", "probe")):
                param.add_(torch.randn_like(param) * 0.1)
    model.eval().save_pretrained(directory)
    if family == "clip":
        processor = transformers.CLIPImageProcessor(size={"shortest_edge": image_size},
                                                    crop_size={"height": image_size, "width": image_size})
    elif family == "siglip":
        processor = transformers.SiglipImageProcessor(size={"height": image_size, "width": image_size})
    else:  # each image resized to its own grid of at most 24 patches of 4 px (the 4 x 4 positions resized to it)
        processor = transformers.Siglip2ImageProcessor(patch_size=PATCH, max_num_patches=24)
    processor.save_pretrained(directory)
    return directory


def clip_frames(count: int, seed: int, size=(84, 56)) -> list:
    """``count`` random RGB frames of ``size`` (multiples of the patch and merge within the saved processor's pixel
    range: the processor keeps their size, so the reference needs no resize)."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    return [Image.fromarray(rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8), "RGB") for _ in range(count)]


def video_pixels(frames: list, images, patch: int = 14):
    """``pixel_values_videos`` and the grid of one video, as ``Qwen2VLVideoProcessor._preprocess`` (and Qwen3-VL's,
    ``patch`` 16) lays them out: frames rescaled and normalized, the last repeated to an even count, then viewed as
    ``(1, t, 2, C, h/2, 2, P, w/2, 2, P)`` and permuted ``(0, 1, 4, 7, 5, 8, 3, 2, 6, 9)``."""
    import numpy as np
    import torch

    mean, std = np.array(images.image_mean, dtype=np.float32), np.array(images.image_std, dtype=np.float32)
    pixels = np.stack([(np.asarray(f, dtype=np.float32) * np.float32(images.rescale_factor) - mean) / std
                       for f in frames])
    video = torch.from_numpy(pixels).permute(0, 3, 1, 2)  # [T, C, H, W]
    if video.shape[0] % 2:
        video = torch.cat([video, video[-1:]])
    frames_, channels, height, width = video.shape
    t, h, w = frames_ // 2, height // patch, width // patch
    patches = video.view(1, t, 2, channels, h // 2, 2, patch, w // 2, 2, patch).permute(0, 1, 4, 7, 5, 8, 3, 2, 6, 9)
    return patches.reshape(t * h * w, channels * 2 * patch * patch), (t, h, w)


def video_reference_vector(reference, tokenizer, prompt: str, pixels, grid, **extra):
    """``reference``'s (a Qwen-VL base model) last-token state of ``prompt`` holding one video's ``<|video_pad|>``
    tokens, given the video's ``pixel_values_videos`` and grid (``extra``: more forward arguments), L2-normalized."""
    import torch

    input_ids = tokenizer([prompt], return_tensors="pt")["input_ids"]
    kinds = 2 * (input_ids == tokenizer.convert_tokens_to_ids("<|video_pad|>")).int()  # mm_token_type_ids: videos
    with torch.no_grad():
        state = reference(input_ids=input_ids, pixel_values_videos=pixels, video_grid_thw=torch.tensor([grid]),
                          mm_token_type_ids=kinds, **extra).last_hidden_state[0, -1]
    return (state / state.norm()).numpy()


def random_images(n: int, *, seed: int = 0) -> list:
    """``n`` PIL images of odd sizes and every mode wde converts (RGB, L, RGBA, P, tall, wide, tiny)."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    shapes = [(37, 41), (64, 20), (19, 90), (30, 30), (123, 77), (8, 9)]
    modes = ["RGB", "L", "RGBA", "P", "RGB", "LA"]
    images = []
    for i in range(n):
        w, h = shapes[i % len(shapes)]
        picture = Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8), "RGB")
        mode = modes[i % len(modes)]
        images.append(picture.convert(mode) if mode != "RGBA" else _with_alpha(picture, rng))
    return images


def _with_alpha(picture, rng):
    import numpy as np
    from PIL import Image

    alpha = Image.fromarray(rng.integers(0, 256, picture.size[::-1], dtype=np.uint8), "L")
    rgba = picture.convert("RGBA")
    rgba.putalpha(alpha)
    return rgba
