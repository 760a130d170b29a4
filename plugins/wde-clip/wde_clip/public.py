"""What other plugins may use of wde-clip (an image model plugging into the ``image-text`` workflow declares
``wde-clip`` as a dependency): the image-text stages and workflow, ``DualEncoder`` (CLIP's and SigLIP's model),
``TextTower`` and ``Towers`` (which towers a config holds). Image decoding, the exact PIL preprocessing and the vision
transformer a vision-language model reuses are wde-images' (``wde_images.public``)."""

from wde_clip.model import DualEncoder
from wde_clip.plugin import IMAGE_TEXT_WORKFLOW
from wde_clip.stages import ImageTextBatch, ImageTextBatchBuilder, ImageTextInputProcessor, ImageTextTokenizer
from wde_clip.text_tower import TextTower
from wde_clip.towers_config import Towers

__all__ = ["IMAGE_TEXT_WORKFLOW", "ImageTextBatch", "ImageTextBatchBuilder", "ImageTextInputProcessor",
           "ImageTextTokenizer", "TextTower", "Towers", "DualEncoder"]
