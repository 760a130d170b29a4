"""What users and other plugins may use of wde-qwen2-vl: ``maxsim``, late-interaction scores between token vectors
(``encode(..., output="multi_vector")`` results), the vision towers (Qwen2-VL's, Qwen2.5-VL's windowed one, and
``vision_tower`` choosing by config), the parts of Qwen2-VL's tower other towers build on (``VisionBlock``,
``PatchMerger``) and the multimodal rotary positions; for other late-interaction models (ColPali), the query/page
tokenizer to build on. Their workflows may name this plugin's ``query-page`` input processor and ``multi-vector``
output processor, and its ``late_interaction`` task serves them. Other vision-language embedders (Qwen3-VL) may
name its ``vision-text`` input processor, ``qwen2-vl`` tokenizer and ``vision-text`` engine arguments (``framing``:
``find_chat_template`` says whether a directory can take ``chat``; ``refuse_placeholders`` checks such an
argument), and build on ``VisionTextBatchBuilder`` (its batches are ``QueryPageBatch``es, an image request's pixels
a ``PagePixels`` or a tuple of them: ``pages_of``), ``VisionTextTokenizer`` (its ``image_pixels``,
``preprocess_image``, ``cut_to_fit`` and ``placeholder_in``; ``VISION``, the image placeholder it expands) and
``map_vl_name`` (checkpoint names onto a ``text`` decoder and a ``visual`` tower)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from wde_qwen2_vl.framing import find_chat_template, refuse_placeholders
from wde_qwen2_vl.stages import PagePixels, QueryPageBatch, QueryPageTokenizer, pages_of
from wde_qwen2_vl.video import VideoFrames, group_times
from wde_qwen2_vl.vision_text import VISION, VisionTextBatchBuilder, VisionTextTokenizer
from wde_qwen2_vl.vision import PatchMerger, VisionBlock, VisionTower, patch_positions
from wde_qwen2_vl.vl_decoder import map_vl_name, mrope_positions, vision_tower
from wde_qwen2_vl.window_vision import WindowVisionTower, build_windows


def maxsim(queries: Sequence[np.ndarray], documents: Sequence[np.ndarray]) -> np.ndarray:
    """``[queries, documents]`` float32: for each query token its best inner product with a document token, summed
    over the query's tokens (ColPali's and ColQwen2's ``score_retrieval``)."""
    scores = np.empty((len(queries), len(documents)), dtype=np.float32)
    for j, document in enumerate(documents):
        document = np.asarray(document, dtype=np.float32)
        for i, query in enumerate(queries):
            scores[i, j] = (np.asarray(query, dtype=np.float32) @ document.T).max(axis=1).sum()
    return scores


__all__ = ["maxsim", "mrope_positions", "VisionTower", "WindowVisionTower", "vision_tower", "build_windows",
           "patch_positions", "QueryPageTokenizer", "VisionBlock", "PatchMerger", "VisionTextBatchBuilder",
           "QueryPageBatch", "PagePixels", "map_vl_name", "find_chat_template", "VisionTextTokenizer", "VISION", "pages_of",
           "refuse_placeholders", "VideoFrames", "group_times"]
