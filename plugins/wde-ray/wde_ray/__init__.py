"""wde-ray: wde engines on Ray -- :func:`embed`, :func:`rerank` and :func:`score` over Ray Datasets (one
``Engine`` per actor of an actor pool), :func:`serve_app` (``wde serve`` as a Ray Serve deployment).

Importing the package is cheap (the plugin's entry point loads it with every ``wde`` command): Ray is
imported on first use of a name.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"
__all__ = ["embed", "rerank", "score", "serve_app", "RowError"]

_HOMES = {"embed": "wde_ray.batch", "rerank": "wde_ray.batch", "score": "wde_ray.batch",
          "serve_app": "wde_ray.serve", "RowError": "wde_ray.rows"}


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'wde_ray' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(_HOMES[name]), name)
