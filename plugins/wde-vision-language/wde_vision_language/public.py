"""What vision-language plugins may use of wde-vision-language. Their workflows may name its ``query-page`` input
processor, ``colqwen2`` tokenizer and ``query-page`` batch builder (late-interaction models: ColQwen2, ColPali), and
its ``vision-text`` input processor, ``qwen2-vl`` tokenizer, ``vision-text`` batch builder and ``vision-text`` engine
arguments (single-vector embedders: Qwen2-VL, Qwen2.5-VL, Qwen3-VL). Their code may build on:

- the query/page stages: ``QueryPageTokenizer`` (ColPali's tokenizer subclasses it), ``QueryPageBatch`` (a batch's
  images' patches beside its tokens), ``PagePixels`` and ``pages_of`` (a request's preprocessed images);
- the text/image stages: ``VisionTextTokenizer`` (its ``image_pixels``, ``preprocess_image``, ``cut_to_fit`` and
  ``placeholder_in``; ``VISION``, the image placeholder it expands), ``VisionTextBatchBuilder``, the framing's
  ``find_chat_template`` (whether a directory can take ``chat``) and ``refuse_placeholders``; videos as their frames
  (``VideoFrames``, ``frame_groups``, ``group_times``);
- Qwen-VL's vision towers: ``VisionTower`` (Qwen2-VL's, the skeleton), ``VisionBlock`` and ``PatchMerger`` (what
  other towers override), ``WindowVisionTower`` (Qwen2.5-VL's; ``build_windows``, ``window_order``),
  ``vision_tower`` (choosing by config), ``patch_positions``;
- ``map_vl_name`` (checkpoint names onto a ``text`` decoder and a ``visual`` tower) and ``mrope_positions`` (each
  token's temporal, row and column positions).

Imports torch: the plugin's entry point does not import this module."""

from wde_vision_language.framing import find_chat_template, refuse_placeholders
from wde_vision_language.query_page import PagePixels, QueryPageBatch, QueryPageTokenizer, pages_of
from wde_vision_language.video import VideoFrames, frame_groups, group_times
from wde_vision_language.vision import PatchMerger, VisionBlock, VisionTower, patch_positions
from wde_vision_language.vision_text import VISION, VisionTextBatchBuilder, VisionTextTokenizer
from wde_vision_language.vl_model import map_vl_name, mrope_positions, vision_tower
from wde_vision_language.window_vision import WindowVisionTower, build_windows, window_order

__all__ = ["find_chat_template", "refuse_placeholders", "PagePixels", "QueryPageBatch", "QueryPageTokenizer",
           "pages_of", "VideoFrames", "frame_groups", "group_times", "PatchMerger", "VisionBlock", "VisionTower",
           "patch_positions", "VISION", "VisionTextBatchBuilder", "VisionTextTokenizer", "map_vl_name",
           "mrope_positions", "vision_tower", "WindowVisionTower", "build_windows", "window_order"]
