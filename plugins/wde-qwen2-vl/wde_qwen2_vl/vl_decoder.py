"""What Qwen2-VL's and Qwen2.5-VL's models share: the vision tower their config names, the decoder's config as
wde-qwen2-bidir reads it, checkpoint names of either transformers layout, and multimodal rotary positions (M-RoPE:
temporal, height and width positions, each rotating its section of the head; an image's as both
``get_rope_index``es make them, Qwen2.5-VL's time scaling applying to videos only)."""

from __future__ import annotations

import copy
import numbers

import torch

from wde_qwen2_vl.vision import VisionTower
from wde_qwen2_vl.window_vision import WindowVisionTower, window_units

# checkpoint prefixes (transformers 5's layout, then 4.x's) -> the model's submodules
_PREFIXES = (("model.visual.", "visual."), ("visual.", "visual."), ("model.language_model.", "text."),
             ("language_model.", "text."), ("model.", "text."))


def vision_tower(vision_config, attention) -> VisionTower:
    """Qwen2.5-VL's windowed tower for a config with ``window_size`` and ``fullatt_block_indexes``, else
    Qwen2-VL's."""
    if window_units(vision_config) is not None:
        return WindowVisionTower(vision_config, attention)
    return VisionTower(vision_config, attention)


def text_config(vl_config):
    """The decoder's config as wde-qwen2-bidir reads a Qwen2 one (Qwen2-VL's q/k/v have biases)."""
    text = copy.deepcopy(vl_config.text_config)
    text.model_type = "qwen2"
    return text


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


def mrope_rotary(tables, positions: torch.Tensor, sections: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin ``[T, head_dim]`` for ``[3, T]`` positions: frequencies of section ``k`` (``sections`` over half the
    head) take position component ``k``, as transformers' ``recomposition_frequencies``."""
    component = torch.cat([torch.full((size,), k % 3) for k, size in enumerate(sections)])
    component = torch.cat((component, component)).to(positions.device)
    dims = torch.arange(component.numel(), device=positions.device)
    picked = positions[component]  # [head_dim, T]: each dimension's position component
    return tables.cos[picked, dims[:, None]].T, tables.sin[picked, dims[:, None]].T


def embed_with_images(model, model_input) -> torch.Tensor:
    """Token embeddings of ``model`` (a ``text`` decoder and a ``visual`` tower), the batch's images' merged patches
    put at their ``<|image_pad|>`` tokens."""
    x = model.text.embed_tokens(model_input.input_ids)
    if model_input.pixel_patches is None:
        return x
    images = model.visual(model_input.pixel_patches, model_input.patch_positions, model_input.vision_metadata,
                          model_input.vision_windows)
    return x.index_copy(0, model_input.image_token_index, images.to(x.dtype))
