"""The kit's HF reference: where ``AutoModel`` is the wrong one (a T5 config loads ``T5Model``, decoder included, which
fails with "You must specify exactly one of input_ids or inputs_embeds"), the error says to pass ``hf_model=``; the
right reference passed that way (``T5EncoderModel``) gives the encoder's states."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoTokenizer, T5Config, T5EncoderModel, T5Model

from wde_plugin_kit import save_random_model, wordpiece_tokenizer
from wde_plugin_kit.parity import hf_token_states, load_hf_model


@pytest.fixture(scope="module")
def t5_dir(tmp_path_factory):
    """A random-weight T5 directory (``T5Model``) with a WordPiece tokenizer."""
    directory = tmp_path_factory.mktemp("t5")
    vocab = wordpiece_tokenizer(directory)
    config = T5Config(vocab_size=vocab, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4,
                      architectures=["T5Model"])
    return save_random_model(directory, config, model_class=T5Model, seed=0, tokenizer=None)


def test_automodel_on_a_t5_config_says_to_pass_hf_model(t5_dir):
    tokenizer = AutoTokenizer.from_pretrained(str(t5_dir))
    reference = load_hf_model(t5_dir)
    assert type(reference).__name__ == "T5Model"
    with pytest.raises(ValueError, match=r"T5Model does not run as an encoder.*pass the model to compare with as "
                                         r"hf_model=") as failure:
        hf_token_states(reference, tokenizer, ["hello world"], 16)
    assert "You must specify exactly one of input_ids or inputs_embeds" in str(failure.value)


def test_the_encoder_passed_as_hf_model_gives_its_states(t5_dir):
    tokenizer = AutoTokenizer.from_pretrained(str(t5_dir))
    encoder = T5EncoderModel.from_pretrained(str(t5_dir)).eval()
    states, = hf_token_states(encoder, tokenizer, ["hello world"], 16)
    ids = tokenizer("hello world", return_tensors="pt")["input_ids"]
    with torch.inference_mode():
        expected = encoder(input_ids=ids).last_hidden_state[0].numpy()
    assert states.shape == (ids.shape[1], 32) and abs(states - expected).max() == 0
