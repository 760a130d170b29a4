"""Reading a sentence-transformers ``SparseEncoder`` directory: the SPLADE pooling, the Router's routes and the
``max_active_dims`` default; the variant's matcher and its ``configure`` step."""

from __future__ import annotations

import ast
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

POOLING_STRATEGIES = ("max", "sum")
ACTIVATIONS = ("relu", "log1p_relu")


@dataclass
class SpladeLayout:
    """What the directory's sentence-transformers files say about its sparse encoding."""

    pooling: str = "max"
    activation: str = "relu"
    max_active_dims: int | None = None
    mlm_folder: str = ""  # the MLM's folder (relative to the root): "" for a plain SPLADE directory
    static_routes: dict[str, str] = field(default_factory=dict)  # Router route -> SparseStaticEmbedding folder
    mlm_route: str | None = None  # the Router route served by the MLM + SpladePooling
    default_route: str | None = None
    route_mappings: dict[str, str] = field(default_factory=dict)  # "(task, modality)" as the Router saves it
    module_types: list[str] = field(default_factory=list)


def _json(path: Path):
    if not path.is_file():
        return None
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _kind(module_type: str) -> str:
    return module_type.rsplit(".", 1)[-1]


def _is_mlm(root: Path, folder: str, module_type: str) -> bool:
    """An ``MLMTransformer``, or a ``Transformer`` saved with ``transformer_task="fill-mask"``."""
    config = _json(root / folder / "sentence_bert_config.json") or {}
    return _kind(module_type) == "MLMTransformer" or (
        _kind(module_type) == "Transformer" and config.get("transformer_task") == "fill-mask")


def _mlm_and_pooling(root: Path, modules: list[tuple[str, str]], layout: SpladeLayout) -> bool:
    """``[(folder, type)]`` is an MLM then a ``SpladePooling``: record the pooling and the MLM's folder."""
    if len(modules) != 2 or not _is_mlm(root, *modules[0]) or _kind(modules[1][1]) != "SpladePooling":
        return False
    config = _json(root / modules[1][0] / "config.json") or {}
    layout.pooling = config.get("pooling_strategy", "max")
    layout.activation = config.get("activation_function", "relu")
    if layout.pooling not in POOLING_STRATEGIES or layout.activation not in ACTIVATIONS:
        raise ValueError(f"{root / modules[1][0] / 'config.json'}: SpladePooling with pooling_strategy="
                         f"{layout.pooling!r}, activation_function={layout.activation!r}; wde serves "
                         f"{POOLING_STRATEGIES} with {ACTIVATIONS}")
    layout.mlm_folder = modules[0][0]
    return True


def _router(root: Path, layout: SpladeLayout) -> bool:
    """A Router: one route an MLM + ``SpladePooling``, the others a ``SparseStaticEmbedding`` each."""
    config = _json(root / "router_config.json") or {}
    types, structure = config.get("types", {}), config.get("structure", {})
    for route, folders in structure.items():
        modules = [(folder, types.get(folder, "")) for folder in folders]
        if len(modules) == 1 and _kind(modules[0][1]) == "SparseStaticEmbedding":
            layout.static_routes[route] = modules[0][0]
        elif layout.mlm_route is None and _mlm_and_pooling(root, modules, layout):
            layout.mlm_route = route
        else:
            return False
    parameters = config.get("parameters", {})
    layout.default_route = parameters.get("default_route") or (next(iter(structure), None)
                                                               if parameters.get("allow_empty_key", True) else None)
    layout.route_mappings = dict(parameters.get("route_mappings") or {})
    layout.module_types = sorted(set(types.values()))
    return layout.mlm_route is not None


def read_layout(directory) -> SpladeLayout | None:
    """The directory's :class:`SpladeLayout`, or ``None`` when it is no SPLADE / inference-free sparse encoder."""
    path = Path(directory.path)
    root = path.parent if (path.parent / "router_config.json").is_file() else path
    modules = [(m.get("path", ""), m.get("type", "")) for m in _json(root / "modules.json") or []]
    layout = SpladeLayout(max_active_dims=(_json(root / "config_sentence_transformers.json") or {}).get(
        "max_active_dims"))
    if len(modules) == 1 and _kind(modules[0][1]) == "Router":
        found = _router(root, layout)
    else:
        found = _mlm_and_pooling(root, modules, layout)
    if not found or (root / layout.mlm_folder).resolve() != path.resolve():
        return None
    layout.module_types = sorted(set(layout.module_types) | {t for _, t in modules})
    layout.mlm_folder = str(root / layout.mlm_folder)
    layout.static_routes = {route: str(root / folder) for route, folder in layout.static_routes.items()}
    return layout


def is_sparse_encoder(directory) -> str | None:
    """The matcher of the splade variant: modules.json has an MLM + ``SpladePooling`` (or a Router with one)."""
    layout = read_layout(directory)
    if layout is None:
        return None
    statics = ", ".join(f"{route}: SparseStaticEmbedding" for route in layout.static_routes)
    where = f"Router ({layout.mlm_route}: MLM + SpladePooling; {statics})" if layout.mlm_route else \
        "MLM + SpladePooling"
    return f"modules.json: {where}, {layout.pooling} pooling of {layout.activation}"


def configure(propose, directory, args) -> None:
    """Serve the sparse-encoder modules; put the layout in ``extras["splade"]``; cap the length as the MLM's folder
    says."""
    layout = read_layout(directory)
    propose.served_modules.update(layout.module_types)
    max_active_dims = getattr(args, "max_active_dims", None)
    if max_active_dims is not None:
        layout.max_active_dims = max_active_dims
        propose.notes["max_active_dims"] = "engine argument max_active_dims"
    elif layout.max_active_dims is not None:
        propose.notes["max_active_dims"] = "config_sentence_transformers.json max_active_dims"
    propose.extras["splade"] = asdict(layout)
    max_len = (_json(Path(layout.mlm_folder) / "sentence_bert_config.json") or {}).get("max_seq_length")
    if layout.mlm_route and isinstance(max_len, int):
        propose.length_limit = (max_len, f"{Path(layout.mlm_folder).name}/sentence_bert_config.json")
    for route, folder in layout.static_routes.items():
        static = _static_size(Path(folder))
        if static != directory.config.vocab_size:
            raise ValueError(f"{folder}: SparseStaticEmbedding of route {route!r} has {static} weights, the MLM "
                             f"{directory.config.vocab_size} vocabulary rows: their sparse vectors cannot be compared")


def _static_size(folder: Path) -> int:
    """The number of weights of a SparseStaticEmbedding folder (its ``weight`` tensor)."""
    from safetensors import safe_open

    with safe_open(str(folder / "model.safetensors"), framework="pt") as f:
        return int(f.get_slice("weight").get_shape()[0])


def resolve_route(layout: dict, task: str | None) -> str:
    """The Router's route for ``task`` (``"query"``, ``"document"`` or ``None``), text modality, as the Router."""
    mappings = {ast.literal_eval(key): route for key, route in layout["route_mappings"].items()}
    for key in ((task, "text"), (task, None), (None, "text"), (None, None)):
        if key in mappings:
            return mappings[key]
    routes = {layout["mlm_route"], *layout["static_routes"]}
    if task is not None and task in routes:
        return task
    if layout["default_route"] is None:
        raise ValueError(f"prompt_name={task!r}: the Router has no route for it and no default route; routes: "
                         f"{', '.join(sorted(routes))}")
    return layout["default_route"]
