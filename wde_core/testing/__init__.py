"""A kit for plugin authors: load a plugin in process, build tiny tokenizers and random models, check parity."""

from __future__ import annotations

from wde_core.testing.host import plugin_host
from wde_core.testing.models import save_random_model
from wde_core.testing.parity import assert_matches_hf
from wde_core.testing.st_files import write_st_files
from wde_core.testing.tokenizer_builders import bpe_tokenizer, wordpiece_tokenizer

__all__ = ["assert_matches_hf", "bpe_tokenizer", "plugin_host", "save_random_model", "wordpiece_tokenizer",
           "write_st_files"]
