"""wde-plugin-kit: what a plugin author needs to prove parity (load a plugin in process, build tiny tokenizers and
random models, compare with HF) and ``wde plugin new``."""

from __future__ import annotations

from wde_plugin_kit.host import PluginProblemError, plugin_host
from wde_plugin_kit.models import save_random_model
from wde_plugin_kit.parity import assert_matches_hf
from wde_plugin_kit.st_files import write_st_files
from wde_plugin_kit.tokenizer_builders import bpe_tokenizer, wordpiece_tokenizer

__all__ = ["PluginProblemError", "assert_matches_hf", "bpe_tokenizer", "plugin_host", "save_random_model",
           "wordpiece_tokenizer", "write_st_files"]
