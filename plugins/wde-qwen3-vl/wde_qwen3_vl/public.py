"""What other plugins may use of wde-qwen3-vl: Qwen3-VL's vision tower (deepstack features beside the merged
tokens), its interleaved multimodal rotary positions and the learned-position taps its batches carry. Imports torch:
the plugin's entry point does not import this module."""

from wde_qwen3_vl.model import interleaved_mrope_rotary, mrope_components
from wde_qwen3_vl.stages import position_taps
from wde_qwen3_vl.vision import Qwen3VisionTower

__all__ = ["Qwen3VisionTower", "interleaved_mrope_rotary", "mrope_components", "position_taps"]
