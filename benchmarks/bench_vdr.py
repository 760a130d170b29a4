"""Visual document retrieval: ColQwen2 on wde against transformers' ``ColQwen2ForRetrieval``, same weights, same
processor, alternating rounds. Prints pages/s and queries/s of each, the ratios, and the largest difference of
their token vectors.

Usage: python benchmarks/bench_vdr.py [--pages 16] [--queries 64] [--vision-layers 4] [--text-layers 4] [--rounds 3]
                                      [--profile] [--model colqwen2|colpali]
The model is random with ColQwen2-v1.0's widths (Qwen2-VL-2B: vision 1280 wide, 16 heads, MLP 5120; decoder 1536
wide, 12 heads, 2 key/value heads, MLP 8960; 128-dim vectors) and fewer layers (``--vision-layers``,
``--text-layers``; the real model has 32 and 28: the ratio is per layer), the tests' small BPE tokenizer, and a
processor capped at ``--max-tokens`` merged patches a page (the real one allows 768). Pages are synthetic
document images of four shapes (portrait, landscape, slides, receipts), so a batch mixes page lengths as real PDFs
do; transformers runs them in padded batches of ``--batch-pages`` as its processor makes them (queries in batches
of ``--batch-queries``).

``--model colpali``: ColPali v1.2's widths instead (PaliGemma-3B-448: SigLIP so400m, Gemma-2B; every page 1,024
patches at 448 px), transformers' ``ColPaliForRetrieval``.

``--profile`` adds the roofline (``vdr_profile.py``): one torch-profiled run of each side splits its time into GEMMs,
attention and the rest, counts the FLOPs its GEMMs did (padding included) from the shapes they ran, measures the
GEMM peak of this machine at each of those shapes, and bounds the ratio wde could reach with zero non-GEMM time.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import torch

from common import load_corpus, measure, parser


TEXT = dict(hidden_size=1536, num_attention_heads=12, num_key_value_heads=2, intermediate_size=8960,
            max_position_embeddings=32768,
            rope_parameters={"rope_type": "default", "mrope_section": [16, 24, 24], "rope_theta": 1000000.0})
VISION = dict(embed_dim=1280, hidden_size=1536, num_heads=16, mlp_ratio=4)
SHAPES = [(850, 1100), (1100, 850), (1280, 720), (400, 1200)]
# ColPali v1.2's PaliGemma-3B-448: SigLIP so400m (1152 wide, 16 heads, MLP 4304, 32 x 32 patches of 14 px at 448 px),
# Gemma-2B (2048 wide, 8 heads of 256, 1 key/value head, MLP 16384)
PALI_TEXT = dict(hidden_size=2048, intermediate_size=16384, num_attention_heads=8, num_key_value_heads=1, head_dim=256,
                 max_position_embeddings=8192)
PALI_VISION = dict(hidden_size=1152, intermediate_size=4304, num_attention_heads=16, patch_size=14, image_size=448)


def document_pages(n: int, seed: int = 0) -> list:
    """``n`` page-like RGB images: white paper, dark text-like strokes, a grey figure box, of four shapes."""
    from PIL import Image, ImageDraw

    rng = np.random.default_rng(seed)
    pages = []
    for i in range(n):
        width, height = SHAPES[i % len(SHAPES)]
        page = Image.new("RGB", (width, height), "white")
        draw = ImageDraw.Draw(page)
        for y in range(40, height - 40, 24):
            x = 40
            while x < width - 80:
                length = int(rng.integers(20, 90))
                draw.rectangle((x, y, x + length, y + 10), fill=tuple(int(v) for v in rng.integers(0, 80, 3)))
                x += length + 12
        box = rng.integers(60, min(width, height) // 2, 2)
        draw.rectangle((60, 60, 60 + int(box[0]), 60 + int(box[1])), fill=(180, 180, 200))
        pages.append(page)
    return pages


def reference_runner(reference, processor, items: list, batch: int, is_query: bool):
    """transformers' vectors of ``items`` in padded batches: a list of ``[tokens, dim]`` (padding removed)."""
    def run() -> list[np.ndarray]:
        out = []
        for start in range(0, len(items), batch):
            chunk = items[start:start + batch]
            inputs = processor.process_queries(chunk) if is_query else processor.process_images(chunk)
            with torch.no_grad():
                vectors = reference(**inputs).embeddings
            for row, mask in zip(vectors, inputs["attention_mask"].bool()):
                out.append(row[mask].numpy())
        return out

    return run


MODELS = {"colqwen2": "ColQwen2", "colpali": "ColPali"}


def build_model(args, tmp: Path) -> tuple:
    """The random model of ``args.model`` saved under ``tmp``: its directory, transformers' model and processor."""
    import transformers

    from wde_plugin_kit.vision_language import save_random_colpali, save_random_colqwen2

    if args.model == "colpali":
        directory = save_random_colpali(tmp / "colpali-shape", text={**PALI_TEXT, "num_hidden_layers": args.text_layers},
                                        vision={**PALI_VISION, "num_hidden_layers": args.vision_layers},
                                        embedding_dim=128)
    else:
        directory = save_random_colqwen2(tmp / "colqwen2-shape", text={**TEXT, "num_hidden_layers": args.text_layers},
                                         vision={**VISION, "depth": args.vision_layers}, embedding_dim=128,
                                         max_pixels=args.max_tokens * 28 * 28)
    name = MODELS[args.model]
    reference = getattr(transformers, f"{name}ForRetrieval").from_pretrained(directory, dtype=torch.float32).eval()
    return directory, reference, getattr(transformers, f"{name}Processor").from_pretrained(directory)


def main() -> None:
    options = parser(__doc__)
    options.add_argument("--pages", type=int, default=16)
    options.add_argument("--queries", type=int, default=64)
    options.add_argument("--vision-layers", type=int, default=4)
    options.add_argument("--text-layers", type=int, default=4)
    options.add_argument("--max-tokens", type=int, default=256, help="merged patches a page at most")
    options.add_argument("--batch-pages", type=int, default=4)
    options.add_argument("--batch-queries", type=int, default=32)
    options.add_argument("--profile", action="store_true", help="time split, GEMM FLOPs and peaks, the ratio's bound")
    options.add_argument("--model", choices=sorted(MODELS), default="colqwen2")
    args = options.parse_args()
    torch.set_num_threads(args.threads)

    from common import timed
    from wde_core import Engine

    with tempfile.TemporaryDirectory() as tmp:
        directory, reference, processor = build_model(args, Path(tmp))
        engine = Engine(str(directory), device="cpu", dtype="float32", num_threads=args.threads)
        pages, queries = document_pages(args.pages), [t[:120] for t in load_corpus(args.queries)]
        page_tokens = [len(v) for v in engine.encode(pages[:len(SHAPES)], output="multi_vector")]
        print(f"{MODELS[args.model]} widths, {args.vision_layers} vision / {args.text_layers} decoder layers; {args.pages} pages "
              f"({page_tokens} tokens for the four shapes), {args.queries} queries; backend "
              f"{engine.pipeline.components['attention_backend'].name}; threads {torch.get_num_threads()}; fp32")
        for kind, items, batch in (("pages", pages, args.batch_pages), ("queries", queries, args.batch_queries)):
            runners = {"wde": timed(lambda items=items: engine.encode(items, output="multi_vector")),
                       "transformers": timed(reference_runner(reference, processor, items, batch, kind == "queries"))}
            for run in runners.values():
                run()  # warm-up
            medians, outputs = measure(runners, args.rounds, len(items), unit=kind)
            worst = max(np.abs(a - b).max() for a, b in zip(outputs["wde"], outputs["transformers"]))
            print(f"{kind}/s: wde {medians['wde']:.2f}, transformers {medians['transformers']:.2f}; ratio "
                  f"{medians['wde'] / medians['transformers']:.2f}x; max abs vector difference {worst:.1e}")
            if args.profile:
                from vdr_profile import report_profile

                report_profile(kind, runners, len(items))


if __name__ == "__main__":
    main()
