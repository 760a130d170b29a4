"""Qwen3-VL-Embedding's framing: with a chat template in the directory, each input is embedded inside a chat turn
(``<|im_start|>system\\n{instruction}<|im_end|>\\n<|im_start|>user\\n{image}{text}<|im_end|>\\n``
``<|im_start|>assistant\\n``, the layout the Qwen3-VL-Embedding paper and scripts give) and the assistant header's
last token is pooled. The reference strings are written out by hand from that layout (not rendered by the template
wde renders), laid out as ``Qwen3VLProcessor`` lays out an image, and run through transformers' ``Qwen3VLModel``."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from qwen3_vl_builders import save_random_qwen3_vl
from wde_plugin_kit.image_builders import random_images
from wde_plugin_kit.vision_language import QWEN_VL_CHAT_TEMPLATE, chat_framed
from test_qwen3_vl_embedder import Processor
from wde_core import Engine

DEFAULT = "Represent the user's input."
QUERY = "Retrieve images or text relevant to the user's query."


def reference(model, processor, prompt: str, image=None) -> np.ndarray:
    """transformers' last-token state of one framed input, L2-normalized."""
    with torch.no_grad():
        state = model(**processor(prompt, image)).last_hidden_state[0, -1]
    return (state / state.norm()).numpy()


@pytest.fixture(scope="module")
def chat_model(tmp_path_factory):
    """A random Qwen3-VL saved with the chat template (in ``chat_template.json``, as Qwen3-VL ships it)."""
    from transformers import Qwen3VLModel

    directory = save_random_qwen3_vl(tmp_path_factory.mktemp("qwen3-vl-chat") / "qwen3-vl-embedding-tiny")
    (directory / "chat_template.json").write_text(json.dumps({"chat_template": QWEN_VL_CHAT_TEMPLATE}))
    model = Qwen3VLModel.from_pretrained(directory, dtype=torch.float32, attn_implementation="eager").eval()
    return directory, model, Processor(directory)


def test_inputs_are_embedded_inside_the_chat_turn(chat_model):
    directory, model, processor = chat_model
    pictures = random_images(3, seed=11)
    items = ["a photo of a cat", pictures[0], {"text": "what is shown here?", "image": pictures[1]}, pictures[2]]
    layouts = [("a photo of a cat", None), ("", pictures[0]), ("what is shown here?", pictures[1]), ("", pictures[2])]
    with Engine(str(directory), device="cpu") as engine:
        assert engine.pipeline.reasons["framing"].startswith("chat by default")
        for instruction, prompt in ((DEFAULT, None), (QUERY, QUERY)):
            got = engine.encode(items, prompt=prompt)
            expected = np.stack([reference(model, processor, chat_framed(instruction, text, image is not None),
                                           image=image) for text, image in layouts])
            print(f"{instruction!r}: max abs diff {np.abs(got - expected).max():.2e}")
            assert np.abs(got - expected).max() <= 1e-4
        in_frame = engine.encode(["a photo of a cat"])[0]
    bare = reference(model, processor, "a photo of a cat")
    assert np.abs(in_frame - bare).max() > 1e-3  # the frame matters
    with Engine(str(directory), device="cpu", framing="plain") as engine:
        assert engine.pipeline.reasons["framing"] == "plain: engine argument framing"
        assert np.abs(engine.encode(["a photo of a cat"])[0] - bare).max() <= 1e-4
    with Engine(str(directory), device="cpu", instruction=QUERY, chat_suffix="<|endoftext|>") as engine:  # GME, DSE
        expected = reference(model, processor, chat_framed(QUERY, "a photo of a cat", False) + "<|endoftext|>")
        assert np.abs(engine.encode(["a photo of a cat"])[0] - expected).max() <= 1e-4


def test_a_long_text_is_cut_inside_the_frame(chat_model):
    directory, model, processor = chat_model
    text = " ".join(["the quick brown fox jumps over the lazy dog"] * 40)
    with Engine(str(directory), device="cpu", max_model_len=64) as engine:
        got = engine.encode([text])[0]
        with pytest.raises(ValueError, match="input 0: the query has .* tokens, more than max_model_len=64"):
            engine.encode([text], truncate=False)
        with pytest.raises(ValueError, match="input 0: the chat frame and its instruction alone take"):
            engine.encode(["a cat"], prompt=" ".join(["find"] * 80))
    tokenizer = processor.tokenizer
    head, tail = chat_framed(DEFAULT, "\x00", False).split("\x00")
    head_ids, tail_ids = (tokenizer(part, add_special_tokens=False)["input_ids"] for part in (head, tail))
    kept = tokenizer(text, add_special_tokens=False)["input_ids"][: 64 - len(head_ids) - len(tail_ids)]
    with torch.no_grad():
        state = model(input_ids=torch.tensor([head_ids + kept + tail_ids]),
                      mm_token_type_ids=torch.zeros(1, 64, dtype=torch.int)).last_hidden_state[0, -1]
    assert np.abs(got - (state / state.norm()).numpy()).max() <= 1e-4


def test_framing_refusals_name_what_is_wrong(chat_model, tmp_path):
    directory, _, _ = chat_model
    with pytest.raises(ValueError, match="engine argument framing='chatml': expected one of plain, chat"):
        Engine(str(directory), device="cpu", framing="chatml")
    with pytest.raises(ValueError, match="engine argument instruction: used only with framing='chat'"):
        Engine(str(directory), device="cpu", framing="plain", instruction=QUERY)
    with pytest.raises(ValueError, match="engine argument chat_suffix: contains the placeholder token"):
        Engine(str(directory), device="cpu", chat_suffix="<|image_pad|>")
    with Engine(str(directory), device="cpu") as engine:
        with pytest.raises(ValueError, match="input 0: the prompt .* contains the placeholder token '<.image_pad.>'"):
            engine.encode(["a cat"], prompt="find <|image_pad|>")
    bare = save_random_qwen3_vl(tmp_path / "no-template")
    with Engine(str(bare), device="cpu") as engine:
        assert engine.pipeline.reasons["framing"].startswith("plain by default")
    with pytest.raises(ValueError, match="framing='chat': the model directory has no chat template"):
        Engine(str(bare), device="cpu", framing="chat")
