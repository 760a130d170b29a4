"""What plugins registered: stage components, workflows, architecture links and model sources.

Entries hold import paths (``"module:attr"``), so listing never imports a model. Every path is
checked when registered (its module must be findable) and can be fully imported by ``check()``.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

STAGES = (
    "input_processor",
    "tokenizer",
    "scheduler",
    "model_input_builder",
    "attention_backend",
    "executor",
    "worker",
    "output_processor",
    "engine_args",
)
WORKFLOW_STAGES = tuple(s for s in STAGES if s != "attention_backend")
_TARGET = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")


class RegistrationError(ValueError):
    """A registration a plugin attempted was refused."""


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
    """A named choice of one component per engine stage.

    ``attention_backend`` is normally ``None``: the engine picks one for the device and dtype.
    """

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

    ``defaults`` holds what the model family implies when the model directory is silent, such as
    ``{"pooling": "cls", "normalize": False}``. ``matches`` (``"module:function"``, with a
    ``variant`` name) makes the link apply only to directories for which ``function(directory)``
    returns a reason string (for example bge-m3's extra head files); a matching variant wins over the
    plain link. ``configure`` (``"module:function"``) is called as ``function(settings, directory,
    args, reasons)`` after the core decided the model settings, to refine them.
    """

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


def import_target(target: str) -> Any:
    """Import ``"package.module:attr.sub"`` and return the attribute."""
    module_name, _, attr_path = target.partition(":")
    obj: Any = importlib.import_module(module_name)
    for part in attr_path.split("."):
        obj = getattr(obj, part)
    return obj


def _check_target(target: str) -> None:
    if not isinstance(target, str) or not _TARGET.match(target):
        raise RegistrationError(f"import path {target!r} is not of the form 'package.module:attr'")
    module_name = target.partition(":")[0]
    try:
        found = importlib.util.find_spec(module_name)
    except (ImportError, ValueError) as exc:
        raise RegistrationError(f"import path {target!r} does not resolve: {exc}") from None
    if found is None:
        raise RegistrationError(f"import path {target!r} does not resolve: no module {module_name!r}")


class Registry:
    """Everything the loaded plugins registered, keyed by name, with the provider of each entry."""

    def __init__(self) -> None:
        self.components: dict[str, dict[str, Component]] = {stage: {} for stage in STAGES}
        self.workflows: dict[str, Workflow] = {}
        self.links: dict[tuple[str, str, str], ArchitectureLink] = {}
        self.model_sources: dict[str, ModelSource] = {}
        self.problems: list[Problem] = []

    # -- registration callbacks handed to plugins -------------------------------------------
    def component_registrar(self, stage: str, provider: str) -> Callable[..., None]:
        """Return the ``register(name, target, description="")`` callback for one stage."""

        def register(name: str, target: str, description: str = "") -> None:
            _check_target(target)
            entry = Component(stage, name, target, description, provider)
            self._add(self.components[stage], name, entry, f"{stage.replace('_', ' ')} {name!r}")

        return register

    def workflow_registrar(self, provider: str) -> Callable[[Workflow], None]:
        """Return the ``register(workflow)`` callback."""

        def register(workflow: Workflow) -> None:
            if not isinstance(workflow, Workflow):
                raise RegistrationError(f"expected a wde_core.Workflow, got {type(workflow).__name__}")
            entry = dataclasses.replace(workflow, provider=provider)
            self._add(self.workflows, workflow.name, entry, f"workflow {workflow.name!r}")

        return register

    def architecture_registrar(self, provider: str) -> Callable[[ArchitectureLink], None]:
        """Return the ``register(link)`` callback."""

        def register(link: ArchitectureLink) -> None:
            if not isinstance(link, ArchitectureLink):
                raise RegistrationError(f"expected a wde_core.ArchitectureLink, got {type(link).__name__}")
            for target in link.targets:
                _check_target(target)
            if bool(link.matches) != bool(link.variant):
                raise RegistrationError(f"architecture {link.architecture!r}: a link with `matches` needs a "
                                        "`variant` name, and a variant needs `matches`")
            entry = dataclasses.replace(link, provider=provider)
            variant = f" (variant {link.variant!r})" if link.variant else ""
            what = f"architecture {link.architecture!r} for task {link.task!r}{variant}"
            self._add(self.links, link.key, entry, what)

        return register

    def model_source_registrar(self, provider: str) -> Callable[[str, str], None]:
        """Return the ``register(model_id, resolver)`` callback."""

        def register(model_id: str, resolver: str) -> None:
            _check_target(resolver)
            entry = ModelSource(model_id, resolver, provider)
            self._add(self.model_sources, model_id, entry, f"model source {model_id!r}")

        return register

    def _add(self, table: dict, key: Any, entry: Any, what: str) -> None:
        existing = table.get(key)
        if existing is not None:
            raise RegistrationError(
                f"duplicate {what}: already registered by {existing.provider!r}, "
                f"refused from {entry.provider!r}"
            )
        table[key] = entry

    # -- queries --------------------------------------------------------------------------------
    def component(self, stage: str, name: str, *, needed_by: str = "") -> Component:
        """Return a registered component or raise a ``LookupError`` naming the alternatives."""
        try:
            return self.components[stage][name]
        except KeyError:
            known = ", ".join(sorted(self.components[stage])) or "none"
            who = f" (named by {needed_by})" if needed_by else ""
            raise LookupError(f"no {stage.replace('_', ' ')} {name!r}{who}; registered: {known}") from None

    def links_for(self, architecture: str) -> list[ArchitectureLink]:
        """Return every link registered for ``architecture``: one per task and variant."""
        return [link for link in self.links.values() if link.architecture == architecture]

    def check_references(self) -> list[Problem]:
        """Return problems for workflows naming unknown components and links naming unknown workflows."""
        found = []
        for wf in self.workflows.values():
            for stage, name in wf.stages().items():
                if name is not None and name not in self.components[stage]:
                    msg = f"workflow {wf.name!r} names unknown {stage.replace('_', ' ')} {name!r}"
                    found.append(Problem(wf.provider, msg))
        for link in self.links.values():
            if link.workflow not in self.workflows:
                msg = f"architecture {link.architecture!r} links to unknown workflow {link.workflow!r}"
                found.append(Problem(link.provider, msg))
        return found

    def check_imports(self) -> list[Problem]:
        """Import every registered target; return a problem for each that fails."""
        entries = [(c.provider, c.target) for stage in self.components.values() for c in stage.values()]
        entries += [(link.provider, target) for link in self.links.values() for target in link.targets]
        entries += [(s.provider, s.resolver) for s in self.model_sources.values()]
        found = []
        for provider, target in entries:
            try:
                import_target(target)
            except Exception as exc:  # noqa: BLE001 - report whatever the import raised
                found.append(Problem(provider, f"import path {target!r} failed: {exc!r}"))
        return found
