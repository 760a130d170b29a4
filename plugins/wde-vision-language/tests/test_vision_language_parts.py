"""Parts of wde-vision-language on their own: M-RoPE positions by Qwen-VL's ``get_rope_index`` rule worked by hand,
the chat template a directory offers (in transformers' order of files), and placeholders refused in engine arguments.
The stages' and towers' parity with transformers is tested by the families that run them (wde-qwen2-vl's ColQwen2 and
Qwen2-VL embedders, wde-qwen3-vl, wde-paligemma)."""

from __future__ import annotations

import json

import pytest
import torch

from wde_vision_language.framing import VisionTextEngineArgs
from wde_vision_language.public import find_chat_template, mrope_positions, patch_positions, refuse_placeholders

TEXT, IMAGE = 7, 99


def test_mrope_positions_follow_get_rope_index():
    # two text tokens, an image of grid (1, 4, 6) merged 2x2 (2 x 3 tokens), one text token after it
    ids = [TEXT, TEXT] + [IMAGE] * 6 + [TEXT]
    positions = mrope_positions(ids, [(1, 4, 6)], IMAGE, merge=2)
    image = [[2] * 6, [2, 2, 2, 3, 3, 3], [2, 3, 4, 2, 3, 4]]  # start + (time, row, column)
    expected = [[0, 1] + image[k] + [5] for k in range(3)]  # the text after: start + max(1, 2, 3)
    assert positions.tolist() == expected


def test_patch_positions_walk_each_merge_block_in_the_processors_order():
    # a 2 x 4 grid of patches, merged 2x2: the processor lays out block (0, 0), then block (0, 1), each row by row
    assert patch_positions([(1, 2, 4)], 2).tolist() == [[0, 0], [0, 1], [1, 0], [1, 1],
                                                         [0, 2], [0, 3], [1, 2], [1, 3]]


def test_the_chat_template_comes_from_the_jinja_file_then_the_processors_then_the_tokenizers(tmp_path):
    assert find_chat_template(tmp_path) is None
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": "from the tokenizer"}))
    assert find_chat_template(tmp_path) == "from the tokenizer"
    named = [{"name": "tool_use", "template": "tools"}, {"name": "default", "template": "named default"}]
    (tmp_path / "chat_template.json").write_text(json.dumps({"chat_template": named}))
    assert find_chat_template(tmp_path) == "named default"
    (tmp_path / "chat_template.jinja").write_text("from the jinja file", encoding="utf-8")
    assert find_chat_template(tmp_path) == "from the jinja file"


def test_placeholders_and_unknown_framings_are_refused_in_engine_arguments():
    refuse_placeholders("instruction", "Represent the user's input.")
    with pytest.raises(ValueError, match=r"engine argument chat_suffix: contains the placeholder token '<\|image_pad\|>'"):
        refuse_placeholders("chat_suffix", "a <|image_pad|>")
    with pytest.raises(ValueError, match=r"engine argument framing='fancy': expected one of plain, chat"):
        VisionTextEngineArgs(model="m", framing="fancy")
    with pytest.raises(ValueError, match=r"engine argument instruction: contains the placeholder token"):
        VisionTextEngineArgs(model="m", instruction="<|vision_start|>")
    assert torch.equal(mrope_positions([TEXT], None, IMAGE, 2), torch.zeros(3, 1, dtype=torch.long))
