"""The files ``wde embed-dataset`` reads and writes: JSON lines or Parquet, a file or a folder of them, in;
a folder of Parquet files, out; and the Ray it runs on (a given cluster, or a local one for the run)."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

FORMATS = {".jsonl": "json", ".json": "json", ".parquet": "parquet"}


def input_files(path: str) -> tuple[str, list[str]]:
    """``(format, files)`` of a JSON lines or Parquet file, or of a folder of them (one format, sorted by name)."""
    root = Path(path)
    files = sorted(p for p in root.rglob("*") if p.is_file()) if root.is_dir() else [root]
    files = [p for p in files if p.suffix.lower() in FORMATS and not p.name.startswith((".", "_"))]
    if not files:
        raise ValueError(f"{path}: no .jsonl, .json or .parquet file here")
    formats = {FORMATS[p.suffix.lower()] for p in files}
    if len(formats) > 1:
        raise ValueError(f"{path}: holds both JSON lines and Parquet files; give one format")
    return formats.pop(), [str(p) for p in files]


def read_dataset(path: str) -> Any:
    """A Ray Dataset of the rows of ``path`` (files in name order, rows in file order)."""
    import ray.data

    kind, files = input_files(path)
    if kind == "json":
        return ray.data.read_json(files, lines=True)
    return ray.data.read_parquet(files)


def image_root(path: str) -> str:
    """The folder relative image paths of ``path``'s rows start from: the folder itself, or the file's folder."""
    root = Path(path).resolve()
    return str(root if root.is_dir() else root.parent)


def start_ray(address: str | None, cpus_needed: float) -> bool:
    """Join the cluster at ``address`` (or ``RAY_ADDRESS``), else start a local Ray for the run; ``True`` if
    this call started one. A local Ray gets one logical CPU beyond the actors' for reading and writing."""
    import ray

    address = address or os.environ.get("RAY_ADDRESS")
    if ray.is_initialized():
        return False
    if address:
        ray.init(address=address, log_to_driver=False)
        return False
    cpus = max(os.cpu_count() or 1, math.ceil(cpus_needed) + 1)
    ray.init(num_cpus=cpus, include_dashboard=False, log_to_driver=False)
    return True


def find_cause(exc: BaseException, kind: type) -> BaseException | None:
    """The ``kind`` exception itself (not Ray's task error posing as one) that caused ``exc``, if any."""
    seen: set[int] = set()
    todo = [exc]
    while todo:
        current = todo.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        if type(current) is kind:
            return current
        causes = (current.__cause__, current.__context__, getattr(current, "cause", None))
        todo += [c for c in causes if isinstance(c, BaseException)]
    return None
