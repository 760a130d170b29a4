"""The things plugins register; each holds import paths (``"module:attr"``), so listing imports no model."""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any, Mapping

STAGES = ("input_processor", "tokenizer", "scheduler", "model_input_builder", "attention_backend", "executor",
          "worker", "output_processor", "engine_args")
# What ``ArchitectureLink.defaults`` may say; each becomes a typed field of ``ModelSettings``.
LINK_DEFAULT_KEYS = ("pooling", "normalize", "causal", "position_offset", "max_model_len", "activation")


@dataclass(frozen=True)
class Problem:
    """A plugin that failed to load or a registration that was refused, with the plugin's name."""

    plugin: str
    message: str

    def __str__(self) -> str:
        return f"{self.plugin}: {self.message}"


@dataclass(frozen=True)
class Component:
    """One implementation of an engine stage, known by name and import path."""

    stage: str
    name: str
    target: str
    description: str = ""
    provider: str = ""

    def load(self) -> Any:
        """Import and return the object behind ``target``."""
        return import_target(self.target)


@dataclass(frozen=True)
class Workflow:
    """A named choice of one component per engine stage (``attention_backend=None``: picked per device)."""

    name: str
    input_processor: str
    tokenizer: str
    scheduler: str
    model_input_builder: str
    executor: str
    worker: str
    output_processor: str
    engine_args: str
    attention_backend: str | None = None
    description: str = ""
    provider: str = ""

    def stages(self) -> dict[str, str | None]:
        """Map each stage to the component this workflow names for it."""
        return {stage: getattr(self, stage) for stage in STAGES}


@dataclass(frozen=True)
class ArchitectureLink:
    """Links an HF architecture and task to a workflow and the model class that implements it.

    ``defaults``: what the model family implies where the directory is silent (``LINK_DEFAULT_KEYS``).
    ``matches`` (with a ``variant`` name): ``function(directory)`` returns why the link applies, else it
    does not; a matching variant wins over the plain link. ``configure``: ``function(propose, directory,
    args)``, called before the core decides the model settings to propose candidates (``Proposals``).
    ``position_bias``: the model passes a ``PositionBias`` to its attention backend, so only backends with
    ``supports_position_bias`` serve it (a forced other one is refused by name)."""

    architecture: str
    task: str
    workflow: str
    model: str
    defaults: Mapping[str, Any] = field(default_factory=dict)
    description: str = ""
    variant: str = ""
    matches: str | None = None
    configure: str | None = None
    provider: str = ""
    position_bias: bool = False

    @property
    def targets(self) -> list[str]:
        """The import paths this link names: its model class, and its matcher and configure step if set."""
        return [t for t in (self.model, self.matches, self.configure) if t is not None]

    @property
    def key(self) -> tuple[str, str, str]:
        """``(architecture, task, variant)``: unique among the registered links."""
        return self.architecture, self.task, self.variant

    def match(self, directory) -> str | None:
        """The reason this link applies to ``directory``, ``""`` for a plain link, ``None`` if not."""
        if self.matches is None:
            return ""
        return import_target(self.matches)(directory) or None


@dataclass(frozen=True)
class ModelSource:
    """A local copy of a hub model (for example one shipped inside a PyPI package)."""

    model_id: str
    resolver: str
    provider: str = ""

    def resolve(self):
        """Return the model directory, or ``None`` when the copy is not installed."""
        return import_target(self.resolver)()


@dataclass(frozen=True)
class Task:
    """A task and its front-end methods, from which ``Engine`` and ``AsyncEngine`` are made.

    ``methods`` maps each method name to its *prepare* function, ``prepare(engine, *args, **kwargs) ->
    Call``; ``served_by`` lists the link tasks whose models serve it (default: the task itself)."""

    name: str
    methods: Mapping[str, str]
    inputs: str = ""
    description: str = ""
    served_by: tuple[str, ...] = ()
    provider: str = ""

    @property
    def link_tasks(self) -> tuple[str, ...]:
        """The link tasks whose models serve this task."""
        return self.served_by or (self.name,)


@dataclass(frozen=True)
class CpuPolicy:
    """What the CPU under an engine means for the core's layers, as the ``wde_get_cpu_policy`` hook answers; the
    default reads no CPU: float32 through oneDNN, bf16 by torch's own path, no dtype note."""

    bf16_note: str = ""  # appended to the dtype's reason (``wde inspect``) for bfloat16 on CPU
    widens_bf16_gemms: bool = False  # ``Linear.prepack`` runs bf16 layers as float32 GEMMs on widened weights
    onednn_dtypes: tuple[str, ...] = ("float32",)  # the dtypes oneDNN's CPU linear runs here

    def onednn_takes(self, dtype) -> bool:
        """Whether oneDNN's CPU linear runs ``dtype`` (a ``torch.dtype``) here."""
        return str(dtype).replace("torch.", "") in self.onednn_dtypes


def import_target(target: str) -> Any:
    """Import ``"package.module:attr.sub"`` and return the attribute."""
    module_name, _, attr_path = target.partition(":")
    obj: Any = importlib.import_module(module_name)
    for part in attr_path.split("."):
        obj = getattr(obj, part)
    return obj
