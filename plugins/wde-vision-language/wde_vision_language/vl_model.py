"""What Qwen-VL-style models share beyond their stages (Qwen2-VL, Qwen2.5-VL, Qwen3-VL): the Qwen2-VL family's
vision tower their config names, checkpoint names of either transformers layout onto a ``text`` decoder and a
``visual`` tower, and multimodal rotary positions (M-RoPE: temporal, height and width positions; an image's as both
``get_rope_index``es make them, Qwen2.5-VL's time scaling applying to videos only)."""

from __future__ import annotations

import numbers

import torch

from wde_vision_language.vision import VisionTower
from wde_vision_language.window_vision import WindowVisionTower, window_units

# checkpoint prefixes (transformers 5's layout, then 4.x's) -> the model's submodules
_PREFIXES = (("model.visual.", "visual."), ("visual.", "visual."), ("model.language_model.", "text."),
             ("language_model.", "text."), ("model.", "text."))


def vision_tower(vision_config, attention) -> VisionTower:
    """Qwen2.5-VL's windowed tower for a config with ``window_size`` and ``fullatt_block_indexes``, else
    Qwen2-VL's."""
    if window_units(vision_config) is not None:
        return WindowVisionTower(vision_config, attention)
    return VisionTower(vision_config, attention)


def map_vl_name(model, name: str, prefixes: tuple[tuple[str, str], ...] = _PREFIXES):
    """``(parameter, rows)`` of ``model`` (a ``text`` decoder and a ``visual`` tower) for a checkpoint name, by
    ``prefixes`` (checkpoint prefix, ``"visual."`` or ``"text."``; Qwen2-VL's layouts by default); ``None`` for the
    language-model head."""
    if name.startswith(("lm_head.", "model.lm_head.")):
        return None
    for prefix, ours in prefixes:
        if name.startswith(prefix):
            rest = name[len(prefix):]
            if ours == "visual.":
                mapped, rows = model.visual.map_checkpoint_name(rest)
                return ours + mapped, rows
            mapped = model.text.map_checkpoint_name(rest)
            return None if mapped is None else ("text." + mapped[0], mapped[1])
    return name, None


def _is_count(value) -> bool:
    """Whether ``value`` is one integer (a grid's size), not a grid: Python's, numpy's, or a 0-d tensor."""
    return isinstance(value, numbers.Integral) or (isinstance(value, torch.Tensor) and value.dim() == 0)


def mrope_positions(token_ids: list[int], grids, image_token_id: int, merge: int, video_token_id: int | None = None,
                    intervals: list[float] | None = None) -> torch.Tensor:
    """``[3, n]`` positions of one sequence as Qwen-VL's ``get_rope_index`` makes them: text tokens count on in all
    three; an image's (or video's) merged patches take (start + time, start + row, start + column), and the text
    after it starts one past the largest of them (Qwen's own code and vLLM; transformers 5.24 starts it at start +
    max(rows, columns), which differs only for a video whose times run past its rows and columns). ``grids``: the
    sequence's images' and videos' grids in the order of their placeholder tokens (one grid, or ``None``);
    ``intervals``: each one's temporal step (time = frame group ``k`` x step, truncated; Qwen2.5-VL's videos:
    ``tokens_per_second`` x seconds a group; else 1)."""
    queue = [] if grids is None or len(grids) == 0 else [grids] if _is_count(grids[0]) else list(grids)
    queue = [tuple(int(size) for size in grid) for grid in queue]
    steps = list(intervals) if intervals is not None else [1.0] * len(queue)
    vision = {image_token_id} | ({video_token_id} if video_token_id is not None else set())
    out, current, i = [], 0, 0
    while i < len(token_ids):
        if token_ids[i] in vision and queue:
            (t, h, w), step = queue.pop(0), steps.pop(0)
            h, w = h // merge, w // merge
            tt, hh, ww = torch.meshgrid((torch.arange(t) * step).long(), torch.arange(h), torch.arange(w),
                                        indexing="ij")
            out.append(torch.stack((tt, hh, ww)).reshape(3, -1) + current)
            i, current = i + t * h * w, current + max(int(tt.max()) + 1, h, w)
        else:
            j = i
            while j < len(token_ids) and not (token_ids[j] in vision and queue):
                j += 1
            out.append(torch.arange(current, current + j - i).expand(3, -1))
            i, current = j, current + j - i
    return torch.cat(out, dim=1)
