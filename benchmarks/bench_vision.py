"""Images: a ViT-B/32-shaped CLIP (random weights, 224 px) on generated images, side by side in one run: wde
(``Engine(dir).encode(images)``, fp32 per executor and bf16), sentence-transformers and plain transformers
(``CLIPProcessor`` + ``CLIPModel.get_image_features``), all on the same in-memory PIL images, 2 threads.

Usage: python bench_vision.py [--images 2000] [--rounds 3] [--threads 2] [--executors sync,pipelined]
       [--bf16-executors sync] [--profile-n 128] [--cache-dir DIR] [--no-wde]
The model (openai/clip-vit-base-patch32's config with random weights, its image processor, a small BPE
tokenizer in CLIP's form and the sentence-transformers files) is built once and cached in ``--cache-dir``.
The images are generated (deterministic: smooth colour fields with shapes, JPEG-encoded and decoded, sizes
of photos: 640x480, 480x640, 500x375, 375x500, 640x427, 427x640). Engines run alternately, round after round;
medians of images/s, ratios wde / peer, min cosines against transformers' ``get_image_features`` (batch 32),
the share of the GEMM peak at the model's shapes and, per engine, where the time goes (a torch profile).
"""

from __future__ import annotations

import argparse
import functools
import io
import os
import statistics
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from common import load_corpus, parser
from roofline import ATTENTION_OPS, GEMM_OPS, NORM_OPS, gemm_peak_at_shapes, layer_shapes

# openai/clip-vit-base-patch32's config.json (its text side too, so the checkpoint has the real shape)
VISION = dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12,
              image_size=224, patch_size=32, hidden_act="quick_gelu", layer_norm_eps=1e-5)
TEXT = dict(vocab_size=49408, hidden_size=512, intermediate_size=2048, num_hidden_layers=12, num_attention_heads=8,
            max_position_embeddings=77, hidden_act="quick_gelu", layer_norm_eps=1e-5)
PROJECTION = 512
BOS, EOS, PAD = "<|startoftext|>", "<|endoftext|>", "<|pad|>"
SIZES = [(640, 480), (480, 640), (500, 375), (375, 500), (640, 427), (427, 640)]
MODEL_VERSION = "1"  # bump when what save_clip_vit_b32 writes changes: the cache is rebuilt
HF_BATCH = 32  # the reference: transformers' get_image_features in batches of 32


# --- the model ---------------------------------------------------------------------------------------------
def save_clip_vit_b32(directory: Path, seed: int = 0) -> Path:
    """A random-weight ``CLIPModel`` of openai/clip-vit-base-patch32's shape in ``directory`` (built once: a
    stamp file marks a finished build), with its ``CLIPImageProcessor``, a CLIP-form BPE tokenizer and the
    sentence-transformers files (one ``Transformer`` module: images through ``get_image_features``)."""
    stamp = directory / ".bench-vision-model"
    if stamp.is_file() and stamp.read_text() == MODEL_VERSION:
        return directory
    import transformers
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules import Transformer

    directory.mkdir(parents=True, exist_ok=True)
    bos, eos = save_clip_tokenizer(directory, max_length=TEXT["max_position_embeddings"])
    config = transformers.CLIPConfig(text_config=dict(TEXT, bos_token_id=bos, eos_token_id=eos, pad_token_id=eos),
                                     vision_config=VISION, projection_dim=PROJECTION)
    torch.manual_seed(seed)
    model = transformers.CLIPModel(config).eval()
    with torch.no_grad():  # HF initializes norms to 1 and biases to 0: make them random too
        for name, param in model.named_parameters():
            if name.endswith(("norm.weight", "norm1.weight", "norm2.weight", "pre_layrnorm.weight", ".bias")):
                param.add_(torch.randn_like(param) * 0.1)
    model.save_pretrained(directory)
    transformers.CLIPImageProcessor(  # the hub's preprocessor_config.json: resize the short side, centre crop
        size={"shortest_edge": 224}, crop_size={"height": 224, "width": 224}, do_center_crop=True,
        image_mean=[0.48145466, 0.4578275, 0.40821073], image_std=[0.26862954, 0.26130258, 0.27577711],
        resample=3).save_pretrained(directory)
    st = SentenceTransformer(modules=[Transformer(str(directory))], device="cpu")
    st.save(str(directory))
    stamp.write_text(MODEL_VERSION)
    return directory


def save_clip_tokenizer(directory: Path, max_length: int, vocab: int = 1024) -> tuple[int, int]:
    """A byte-level BPE trained on wiki paragraphs, in CLIP's form (``<|startoftext|> text <|endoftext|>``, padded
    with its own token) saved as a ``PreTrainedTokenizerFast``; returns the BOS and EOS ids. (The hub's CLIP
    tokenizer is not reachable here; the text side is not benchmarked.)"""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=[BOS, EOS, PAD], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(load_corpus(300), trainer=trainer)
    bos, eos = tokenizer.token_to_id(BOS), tokenizer.token_to_id(EOS)
    tokenizer.post_processor = processors.TemplateProcessing(single=f"{BOS} $A {EOS}",
                                                             special_tokens=[(BOS, bos), (EOS, eos)])
    PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token=BOS, eos_token=EOS, pad_token=PAD,
                            model_max_length=max_length).save_pretrained(directory)
    return bos, eos


# --- the images --------------------------------------------------------------------------------------------
def generate_images(n: int, seed: int = 0) -> list:
    """``n`` RGB photos-to-be (the same every run): a smooth colour field with a few shapes and lines at a
    photo's size, JPEG-encoded (quality 90) and decoded, as images read from disk are."""
    from PIL import Image, ImageDraw

    rng = np.random.default_rng(seed)
    images = []
    for i in range(n):
        width, height = SIZES[i % len(SIZES)]
        field = rng.integers(0, 256, (rng.integers(3, 8), rng.integers(3, 8), 3), dtype=np.uint8)
        picture = Image.fromarray(field, "RGB").resize((width, height), Image.Resampling.BICUBIC)
        draw = ImageDraw.Draw(picture)
        for _ in range(int(rng.integers(4, 12))):
            x0, x1 = sorted(rng.integers(0, width, 2).tolist())
            y0, y1 = sorted(rng.integers(0, height, 2).tolist())
            colour = tuple(rng.integers(0, 256, 3).tolist())
            shape = int(rng.integers(0, 3))
            if shape == 0:
                draw.ellipse((x0, y0, x1, y1), fill=colour)
            elif shape == 1:
                draw.rectangle((x0, y0, x1, y1), fill=colour)
            else:
                draw.line((x0, y0, x1, y1), fill=colour, width=int(rng.integers(1, 12)))
        buffer = io.BytesIO()
        picture.save(buffer, format="JPEG", quality=90)
        decoded = Image.open(io.BytesIO(buffer.getvalue()))
        decoded.load()
        images.append(decoded)
    return images


# --- the contenders: each a function of the images that returns float32 [n, 512] ----------------------------
def hf_encoder(path: str, batch_size: int) -> Callable[[list], np.ndarray]:
    """Plain transformers: ``CLIPProcessor(images=batch)`` and ``CLIPModel.get_image_features``, in order."""
    from transformers import CLIPModel, CLIPProcessor

    processor, model = CLIPProcessor.from_pretrained(path), CLIPModel.from_pretrained(path).eval()

    def encode(images: list) -> np.ndarray:
        out = []
        with torch.inference_mode():
            for start in range(0, len(images), batch_size):
                pixels = processor(images=images[start:start + batch_size], return_tensors="pt")["pixel_values"]
                features = model.get_image_features(pixel_values=pixels)
                features = getattr(features, "pooler_output", features)  # a tensor, or an output holding it
                out.append(features.float().numpy())
        return np.concatenate(out)

    return encode


def st_encoder(path: str, batch_size: int = 32) -> Callable[[list], np.ndarray]:
    """sentence-transformers: ``SentenceTransformer(dir).encode(images, batch_size=32)``."""
    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(path, device="cpu")
    return lambda images: np.asarray(st.encode(images, batch_size=batch_size), dtype=np.float32)


def wde_engine(path: str, threads: int, dtype: str, executor: str):
    from wde_core import Engine

    return Engine(path, device="cpu", dtype=dtype, executor=executor, num_threads=threads)


# --- measuring -----------------------------------------------------------------------------------------------
def measure(encoders: dict[str, Callable[[list], np.ndarray]], images: list, rounds: int
            ) -> tuple[dict[str, list[float]], dict[str, np.ndarray]]:
    """Every encoder once per round on all ``images``, alternating; images/s of each round and the last outputs."""
    speeds: dict[str, list[float]] = {name: [] for name in encoders}
    outputs: dict[str, np.ndarray] = {}
    width = max(len(name) for name in encoders) + 1
    for r in range(rounds):
        for name, encode in encoders.items():
            start = time.perf_counter()
            outputs[name] = encode(images)
            seconds = time.perf_counter() - start
            speeds[name].append(len(images) / seconds)
            print(f"  round {r + 1} {name:<{width}} {len(images) / seconds:8.1f} images/s  ({seconds:.1f} s; "
                  f"load average {os.getloadavg()[0]:.1f})", flush=True)
    return speeds, outputs


def min_cosine(a: np.ndarray, b: np.ndarray) -> float:
    cos = (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    return float(cos.min())


def gemm_flops_per_image(vision: dict, projection: int) -> float:
    """FLOPs of the matrix products of one image's forward: the patch embedding (a convolution with stride =
    kernel: one GEMM over the patches), every layer's QKV, attention output and two MLP products over all
    tokens (patches + CLS), and the projection of the pooled CLS state."""
    h, i, layers = vision["hidden_size"], vision["intermediate_size"], vision["num_hidden_layers"]
    patches = (vision["image_size"] // vision["patch_size"]) ** 2
    tokens = patches + 1
    patch_embedding = 2.0 * 3 * vision["patch_size"] ** 2 * h * patches
    blocks = 2.0 * layers * tokens * (3 * h * h + h * h + 2 * h * i)
    return patch_embedding + blocks + 2.0 * h * projection


def time_shares(run: Callable[[], Any]) -> dict[str, float]:
    """Seconds of one ``run()`` by kind, from the profiler's self CPU times: gemm (the convolution of the patch
    embedding included), attention, norms, other ops, and host (the rest of the wall time: image decoding,
    resizing and normalization outside torch, batching, Python)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        start = time.perf_counter()
        run()
        wall = time.perf_counter() - start
    shares: dict[str, float] = defaultdict(float)
    for event in prof.key_averages():
        shares[_kind(event.key)] += event.self_cpu_time_total / 1e6
    shares["host"] = max(0.0, wall - sum(shares.values()))
    shares["wall"] = wall
    return dict(shares)


def _kind(name: str) -> str:
    for kind, ops in (("gemm", (*GEMM_OPS, "convolution")), ("attention", ATTENTION_OPS), ("norms", NORM_OPS)):
        if any(op in name for op in ops):
            return kind
    return "other"


def report_roofline(name: str, images_per_s: float, flops: float, peak: float, shares: dict | None,
                    profiled: int = 0) -> None:
    """bench-cpu's roofline line, per image: images/s, the GEMM rate while GEMMs run (in the profiled run of
    ``profiled`` images), the GEMM-only limit in images/s and the share of it reached, and where the time went."""
    limit = peak * 1e9 / flops
    line = f"{name}: {images_per_s:.1f} images/s"
    if shares:
        line += f"; GEMMs at {flops * profiled / max(shares.get('gemm', 0.0), 1e-9) / 1e9:.0f} GFLOP/s"
    line += (f" (peak at the model's shapes {peak:.0f}); GEMM-only limit {limit:.1f} images/s, reached "
             f"{100 * images_per_s / limit:.0f}%")
    if shares:
        line += "; time: " + ", ".join(f"{kind} {100 * shares.get(kind, 0.0) / shares['wall']:.0f}%"
                                       for kind in ("gemm", "attention", "norms", "other", "host"))
    else:
        line += "; not profiled (the model runs on the executor's worker thread, which the profiler does not see)"
    print(line, flush=True)


def gemm_peaks(rows: int = HF_BATCH * 50) -> dict[torch.dtype, float]:
    """GFLOP/s of the matrix products at the vision blocks' shapes over ``rows`` tokens (32 images), per dtype: the
    higher of wde's prepacked ``Linear`` (benchmarks/roofline.py, the FFN's activation included) and plain
    ``F.linear`` (MKL's or oneDNN's GEMM as transformers calls it), each best of 10 per shape, FLOP-weighted."""
    config = argparse.Namespace(**VISION)
    peaks = {}
    for dtype in (torch.float32, torch.bfloat16):
        flops, seconds = 0.0, 0.0
        for n_in, n_out in layer_shapes(config):
            x, w, b = (torch.randn(rows, n_in, dtype=dtype), torch.randn(n_out, n_in, dtype=dtype),
                       torch.randn(n_out, dtype=dtype))
            linear = functools.partial(torch.nn.functional.linear, x, w, b)
            with torch.inference_mode():
                linear()
                seconds += min(_seconds(linear) for _ in range(10))
            flops += 2.0 * rows * n_in * n_out
        peaks[dtype] = max(flops / seconds / 1e9, gemm_peak_at_shapes(config, dtype, tokens=rows))
    return peaks


def _seconds(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _processor(path: str):
    from transformers import AutoImageProcessor

    return AutoImageProcessor.from_pretrained(path)


def preprocessing_ms(path: str, images: list) -> tuple[float, float]:
    """Milliseconds per image, one thread, of transformers' image processor of the directory (as sentence-transformers
    and ``CLIPProcessor`` run it) and of wde-images' bit-exact copy of it (``wde_images.pixels``; nan without
    wde-images)."""
    processor = _processor(path)
    runs = {"transformers": lambda batch: processor(images=batch, return_tensors="pt")}
    try:
        from wde_images.public import exact_preprocessor

        runs["wde"] = exact_preprocessor(processor) or runs["transformers"]
    except ImportError:
        pass
    times = {}
    for name, run in runs.items():
        run(images[:8])
        times[name] = 1e3 * min(_seconds(lambda: run(images)) for _ in range(2)) / len(images)
    return times["transformers"], times.get("wde", float("nan"))


def main() -> None:
    options = parser(__doc__)
    options.formatter_class = argparse.RawDescriptionHelpFormatter
    options.add_argument("--images", type=int, default=2000, help="generated images (default 2,000)")
    options.add_argument("--executors", default="sync,pipelined", help="wde executors to run in fp32")
    options.add_argument("--bf16-executors", default="sync",
                         help="wde executors to run in bf16 ('' for none)")
    options.add_argument("--hf-batch-sizes", default="32,64", help="transformers' batch sizes; the faster is kept")
    options.add_argument("--profile-n", type=int, default=128, help="images in each profiled run (0: no profile)")
    options.add_argument("--cache-dir", default=str(Path(tempfile.gettempdir()) / "wde-bench-vision"),
                         help="where the model is built once")
    options.add_argument("--no-wde", action="store_true", help="transformers and sentence-transformers only")
    args = options.parse_args()
    torch.set_num_threads(args.threads)
    import transformers

    transformers.logging.disable_progress_bar()

    path = str(save_clip_vit_b32(Path(args.cache_dir) / "clip-vit-b32-random"))
    start = time.perf_counter()
    images = generate_images(args.images)
    made = time.perf_counter() - start
    flops = gemm_flops_per_image(VISION, PROJECTION)
    peaks = gemm_peaks()
    pixels = sum(im.width * im.height for im in images) / len(images)
    hf_ms, wde_ms = preprocessing_ms(path, images[:128])
    print(f"{len(images)} generated images ({pixels / 1e3:.0f} kpixels on average, made in {made:.0f} s); "
          f"CLIP ViT-B/32 shape, random weights, 224 px; {args.threads} threads; torch {torch.__version__}, "
          f"transformers {transformers.__version__}\n{flops / 1e9:.3f} GFLOP/image in GEMMs; GEMM peak at the "
          f"model's shapes ({HF_BATCH * 50} rows): fp32 {peaks[torch.float32]:.0f} GFLOP/s, bf16 "
          f"{peaks[torch.bfloat16]:.0f} GFLOP/s; image preprocessing (transformers' "
          f"{type(_processor(path)).__name__}) {hf_ms:.1f} ms/image, wde-clip's {wde_ms:.1f}", flush=True)

    # transformers' batch size: the faster of the candidates on a sample, alternating twice
    sizes = [int(b) for b in args.hf_batch_sizes.split(",")]
    best = sizes[0]
    if len(sizes) > 1:
        sample = images[:min(len(images), 256)]
        candidates = {f"transformers (batch {b})": hf_encoder(path, b) for b in sizes}
        for encode in candidates.values():
            encode(sample[:max(sizes)])
        trials, _ = measure(candidates, sample, 2)
        best = max(sizes, key=lambda b: statistics.median(trials[f"transformers (batch {b})"]))
    hf_name, st_name = f"transformers (batch {best})", "sentence-transformers (batch 32)"
    encoders: dict[str, Callable[[list], np.ndarray]] = {hf_name: hf_encoder(path, best), st_name: st_encoder(path)}
    engines: dict[str, Any] = {}
    if not args.no_wde:
        for dtype, executors in (("float32", args.executors), ("bfloat16", args.bf16_executors)):
            for executor in filter(None, executors.split(",")):
                name = f"wde {executor} {'fp32' if dtype == 'float32' else 'bf16'}"
                engines[name] = wde_engine(path, args.threads, dtype, executor)
                encoders[name] = lambda items, e=engines[name]: np.asarray(e.encode(items), np.float32)
    for encode in encoders.values():  # first-call costs (oneDNN primitives, prepacking) out of round 1
        encode(images[:64])
    print(f"-- {len(encoders)} engines, {args.rounds} alternating rounds", flush=True)
    speeds, outputs = measure(encoders, images, args.rounds)
    medians = {name: statistics.median(v) for name, v in speeds.items()}
    again = gemm_peaks()  # a peak measured while the host is busy understates: keep the higher
    print(f"GEMM peak again after the rounds: fp32 {again[torch.float32]:.0f} GFLOP/s, bf16 "
          f"{again[torch.bfloat16]:.0f} GFLOP/s; the higher of the two is used below", flush=True)
    peaks = {dtype: max(peaks[dtype], again[dtype]) for dtype in peaks}
    reference = outputs[hf_name] if best == HF_BATCH else hf_encoder(path, HF_BATCH)(images)

    peer = max((hf_name, st_name), key=medians.get)
    dtype_of = {name: torch.bfloat16 if "bf16" in name else torch.float32 for name in encoders}
    print(f"\n{'engine':<36}{'images/s':>9}{'% of peak':>11}{'vs HF':>8}{'vs ST':>8}{'vs faster':>10}"
          f"{'min cos vs HF fp32':>20}")
    for name, speed in medians.items():
        share = 100 * speed * flops / (peaks[dtype_of[name]] * 1e9)
        print(f"{name:<36}{speed:>9.1f}{share:>10.0f}%{speed / medians[hf_name]:>7.2f}x"
              f"{speed / medians[st_name]:>7.2f}x{speed / medians[peer]:>9.2f}x"
              f"{min_cosine(outputs[name], reference):>20.6f}")
    for name in encoders:
        if name.startswith("wde"):
            ratios = [a / b for a, b in zip(speeds[name], speeds[peer])]
            print(f"{name} / {peer} (the faster peer), per round: {', '.join(f'{r:.2f}' for r in ratios)}")

    if args.profile_n:
        print(f"\nroofline (images/s: the medians above; time shares: a torch profile of {args.profile_n} images)")
        part = images[:args.profile_n]
        for name, encode in encoders.items():
            shares = None if "pipelined" in name else time_shares(lambda e=encode: e(part))
            report_roofline(name, medians[name], flops, peaks[dtype_of[name]], shares, len(part))
    for engine in engines.values():
        engine.close()


if __name__ == "__main__":
    main()
