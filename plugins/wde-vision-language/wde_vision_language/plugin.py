"""Registers the stages vision-language models' workflows name: the query/page stages of late-interaction models
(ColQwen2's; ColPali's input processor) and the text/image stages of single-vector embedders with M-RoPE positions
(Qwen2-VL's, Qwen2.5-VL's, Qwen3-VL's), with their ``vision-text`` engine arguments. It links no architecture."""

from __future__ import annotations

from wde_core.plugin_api import hookimpl

_QP = "wde_vision_language.query_page"
_VT = "wde_vision_language.vision_text"


@hookimpl
def wde_register_engine_args(register):
    """The core's arguments plus the vision-language embedders' framing (plain or chat), instruction and chat
    suffix."""
    register("vision-text", "wde_vision_language.framing:VisionTextEngineArgs",
             "the core's arguments plus framing ('plain' or 'chat'), instruction and chat_suffix")


@hookimpl
def wde_register_input_processors(register):
    """Queries (str) and pages (images) in one list; texts, images and text + image inputs in one list."""
    register("query-page", f"{_QP}:QueryPageInputProcessor", "str queries and page images, mixed")
    register("vision-text", f"{_VT}:VisionTextInputProcessor", "texts, images and {'text', 'image'} dicts, mixed")


@hookimpl
def wde_register_tokenizers(register):
    """The directory's ColQwen2-style processor (queries and pages); Qwen2-VL's layout or the chat template."""
    register("colqwen2", f"{_QP}:QueryPageTokenizer", "ColQwen2Processor: queries and pages as it lays them out")
    register("qwen2-vl", f"{_VT}:VisionTextTokenizer",
             "Qwen2VLProcessor's layout (the image placeholder, then the text), or the model's chat template")


@hookimpl
def wde_register_model_input_builders(register):
    """The packed batch plus the pages' patches; plus each token's M-RoPE positions."""
    register("query-page", f"{_QP}:QueryPageBatchBuilder", "packed batch with the pages' patches and grids")
    register("vision-text", f"{_VT}:VisionTextBatchBuilder", "packed batch, images' patches, M-RoPE positions")
