"""Registers the ``image-text`` workflow (its input processor, tokenizer and batch builder), CLIP and SigLIP
with their vision and text halves, and the ``similarity`` task."""

from __future__ import annotations

from dataclasses import replace

from wde_core.plugin_api import EMBED_WORKFLOW, ArchitectureLink, Task, hookimpl

WORKFLOW = "image-text"
_S = "wde_clip.stages"
# architecture -> what it is; every one embeds through the image-text workflow with the one model class
ARCHITECTURES = {
    "CLIPModel": "CLIP: text (causal, pooled at EOS) and vision towers, projected into one space",
    "CLIPVisionModelWithProjection": "CLIP's vision tower and projection alone (image embeddings)",
    "CLIPTextModelWithProjection": "CLIP's text tower and projection alone (text embeddings)",
    "CLIPVisionModel": "CLIP's vision tower alone: the normed class token",
    "SiglipModel": "SigLIP: text (pooled at the last of 64 padded tokens) and vision (attention-pooling head) towers",
    "SiglipVisionModel": "SigLIP's vision tower alone (image embeddings)",
    "SiglipTextModel": "SigLIP's text tower alone (text embeddings)",
    "Siglip2Model": "SigLIP 2: SigLIP's towers; NaFlex images, each its own patch grid with resized positions",
    "Siglip2VisionModel": "SigLIP 2's vision tower alone (image embeddings)",
    "Siglip2TextModel": "SigLIP 2's text tower alone (text embeddings)",
}
IMAGE_TEXT_WORKFLOW = replace(EMBED_WORKFLOW, name=WORKFLOW, input_processor="image-text", tokenizer="image-text",
                              model_input_builder="image-text",
                              description="texts and images -> their towers -> vectors in one space")


@hookimpl
def wde_register_input_processors(register):
    """Texts and image inputs in one list."""
    register("image-text", f"{_S}:ImageTextInputProcessor", "texts and images (PIL, path, bytes, data URL), mixed")


@hookimpl
def wde_register_tokenizers(register):
    """Texts tokenized, images decoded and preprocessed by the directory's image processor."""
    register("image-text", f"{_S}:ImageTextTokenizer", "fast tokenizer for texts; image processor for images")


@hookimpl
def wde_register_model_input_builders(register):
    """Packed texts beside stacked images."""
    register("image-text", f"{_S}:ImageTextBatchBuilder", "texts packed, images stacked, no padding")


@hookimpl
def wde_register_workflows(register):
    """The image-text workflow: the embed workflow with the three stages above."""
    register(IMAGE_TEXT_WORKFLOW)


@hookimpl
def wde_register_tasks(register):
    """``similarity(a, b)``: cosine similarities between two lists of inputs of any embed model."""
    register(Task("similarity", {"similarity": "wde_clip.similarity:similarity"},
                  inputs="two lists of texts or images", description="cosine similarity matrix of two lists",
                  served_by=("embed",)))


@hookimpl
def wde_register_architectures(register):
    """Every CLIP and SigLIP architecture embeds through the image-text workflow."""
    for architecture, description in ARCHITECTURES.items():
        register(ArchitectureLink(
            architecture=architecture, task="embed", workflow=WORKFLOW, model="wde_clip.model:DualEncoder",
            defaults={"pooling": "cls", "normalize": False, "max_model_len": 64}, description=description,
            configure="wde_clip.settings:configure",
        ))
