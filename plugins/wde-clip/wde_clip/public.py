"""What other plugins may use of wde-clip (a vision-language plugin declares ``wde-clip`` as a dependency):
safe image decoding, the image-text stages and workflow, the towers (a vision-language model reads
``VisionTower.patch_states``; ``DualEncoder`` maps a tower's checkpoint names) and the exact PIL preprocessing."""

from wde_clip.images import MAX_IMAGE_PIXELS, load_image
from wde_clip.model import DualEncoder
from wde_clip.pixels import exact_preprocessor
from wde_clip.plugin import IMAGE_TEXT_WORKFLOW
from wde_clip.stages import ImageTextBatch, ImageTextBatchBuilder, ImageTextInputProcessor, ImageTextTokenizer
from wde_clip.towers import Encoder, EncoderLayer, TextTower, VisionTower
from wde_clip.towers_config import Towers

__all__ = ["MAX_IMAGE_PIXELS", "load_image", "IMAGE_TEXT_WORKFLOW", "ImageTextBatch", "ImageTextBatchBuilder",
           "ImageTextInputProcessor", "ImageTextTokenizer", "Encoder", "EncoderLayer", "TextTower", "VisionTower",
           "Towers", "DualEncoder", "exact_preprocessor"]
