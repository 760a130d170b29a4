"""What plugins that take images may use of wde-images: ``load_image`` (an image input decoded to RGB before any batch
runs: no remote URLs, at most ``MAX_IMAGE_PIXELS`` pixels read from the header, errors naming the input),
``exact_preprocessor`` (CLIP's and SigLIP's PIL preprocessing, bit for bit in less time, or ``None`` where it does not
apply); and the CLIP/SigLIP vision transformer: ``VisionEncoder`` (a vision tower alone, as a vision-language model
reuses it: ``vision_model.patch_states`` gives every patch's last state), ``VisionTower``, ``Encoder`` and
``EncoderLayer`` (pre-norm layers over packed tokens, the text tower's too), ``fold_quick_gelu`` and
``map_tower_name`` (CLIP/SigLIP checkpoint names onto them). Imports torch: no plugin's entry point imports this
module."""

from wde_images.images import MAX_IMAGE_PIXELS, load_image
from wde_images.pixels import exact_preprocessor
from wde_images.vision_encoder import VisionEncoder, map_tower_name
from wde_images.vit import Encoder, EncoderLayer, VisionTower, fold_quick_gelu

__all__ = ["MAX_IMAGE_PIXELS", "load_image", "exact_preprocessor", "VisionEncoder", "map_tower_name", "VisionTower",
           "Encoder", "EncoderLayer", "fold_quick_gelu"]
