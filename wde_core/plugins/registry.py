"""What plugins registered: stage components, workflows, architecture links, model sources and tasks.

Every import path is checked when registered (its module must be findable); ``check_imports`` imports them."""

from __future__ import annotations

import dataclasses
import importlib.util
import re
from typing import Any

from wde_core.plugins.entries import (LINK_DEFAULT_KEYS, STAGES, ArchitectureLink, Component, ModelSource, Problem,
                                      Task, Workflow, import_target)

_TARGET = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")
_METHOD = re.compile(r"^[a-z][a-z0-9_]*$")


class RegistrationError(ValueError):
    """A registration a plugin attempted was refused."""


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


def _check_type(entry: Any, expected: type) -> None:
    if not isinstance(entry, expected):
        raise RegistrationError(f"expected a wde_core.{expected.__name__}, got {type(entry).__name__}")


class Registry:
    """Everything the loaded plugins registered, keyed by name, with the provider of each entry."""

    def __init__(self) -> None:
        self.components: dict[str, dict[str, Component]] = {stage: {} for stage in STAGES}
        self.workflows: dict[str, Workflow] = {}
        self.links: dict[tuple[str, str, str], ArchitectureLink] = {}
        self.model_sources: dict[str, ModelSource] = {}
        self.tasks: dict[str, Task] = {}

    # -- what each registration hook's ``register`` calls, with the plugin's name as ``provider`` --------
    def add_component(self, stage: str, provider: str, name: str, target: str, description: str = "") -> None:
        """``register(name, target, description="")`` of a stage hook."""
        _check_target(target)
        entry = Component(stage, name, target, description, provider)
        self._add(self.components[stage], name, entry, f"{stage.replace('_', ' ')} {name!r}")

    def add_workflow(self, provider: str, workflow: Workflow) -> None:
        """``register(workflow)`` of ``wde_register_workflows``."""
        _check_type(workflow, Workflow)
        self._add(self.workflows, workflow.name, dataclasses.replace(workflow, provider=provider),
                  f"workflow {workflow.name!r}")

    def add_link(self, provider: str, link: ArchitectureLink) -> None:
        """``register(link)`` of ``wde_register_architectures``."""
        _check_type(link, ArchitectureLink)
        for target in link.targets:
            _check_target(target)
        if bool(link.matches) != bool(link.variant):
            raise RegistrationError(f"architecture {link.architecture!r}: a link with `matches` needs a "
                                    "`variant` name, and a variant needs `matches`")
        if link.task not in self.tasks:
            raise RegistrationError(f"architecture {link.architecture!r}: unknown task {link.task!r}; "
                                    f"registered tasks: {', '.join(sorted(self.tasks)) or 'none'}")
        unknown = sorted(set(link.defaults) - set(LINK_DEFAULT_KEYS))
        if unknown:
            raise RegistrationError(f"architecture {link.architecture!r}: unknown defaults key(s) "
                                    f"{', '.join(unknown)}; known: {', '.join(LINK_DEFAULT_KEYS)}")
        variant = f" (variant {link.variant!r})" if link.variant else ""
        self._add(self.links, link.key, dataclasses.replace(link, provider=provider),
                  f"architecture {link.architecture!r} for task {link.task!r}{variant}")

    def add_model_source(self, provider: str, model_id: str, resolver: str) -> None:
        """``register(model_id, resolver)`` of ``wde_register_model_sources``."""
        _check_target(resolver)
        self._add(self.model_sources, model_id, ModelSource(model_id, resolver, provider), f"model source {model_id!r}")

    def add_task(self, provider: str, task: Task) -> None:
        """``register(task)`` of ``wde_register_tasks``; a method name another task serves is refused."""
        _check_type(task, Task)
        if not task.methods:
            raise RegistrationError(f"task {task.name!r} names no front-end method")
        for method, target in task.methods.items():
            if not _METHOD.match(method) or method.startswith(("call", "prepare", "close")):
                raise RegistrationError(f"task {task.name!r}: {method!r} is not a usable method name")
            _check_target(target)
            owner = self.method_owner(method)
            if owner is not None:
                raise RegistrationError(f"task {task.name!r}: method {method!r} is already served by task "
                                        f"{owner.name!r} of {owner.provider!r}")
        self._add(self.tasks, task.name, dataclasses.replace(task, provider=provider, methods=dict(task.methods),
                                                             served_by=tuple(task.served_by)), f"task {task.name!r}")

    def _add(self, table: dict, key: Any, entry: Any, what: str) -> None:
        existing = table.get(key)
        if existing is not None:
            raise RegistrationError(f"duplicate {what}: already registered by {existing.provider!r}, "
                                    f"refused from {entry.provider!r}")
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

    def method_owner(self, method: str) -> Task | None:
        """The task whose front end has ``method``, or ``None``."""
        return next((task for task in self.tasks.values() if method in task.methods), None)

    def links_for(self, architecture: str) -> list[ArchitectureLink]:
        """Return every link registered for ``architecture``: one per task and variant."""
        return [link for link in self.links.values() if link.architecture == architecture]

    def check_references(self) -> list[Problem]:
        """Return problems for workflows naming unknown components and links naming unknown workflows."""
        found = []
        for wf in self.workflows.values():
            for stage, name in wf.stages().items():
                if name is not None and name not in self.components[stage]:
                    found.append(Problem(wf.provider, f"workflow {wf.name!r} names unknown {stage.replace('_', ' ')} "
                                                      f"{name!r}"))
        found += [Problem(link.provider, f"architecture {link.architecture!r} links to unknown workflow {link.workflow!r}")
                  for link in self.links.values() if link.workflow not in self.workflows]
        return found

    def check_imports(self) -> list[Problem]:
        """Import every registered target; return a problem for each that fails."""
        entries = [(c.provider, c.target) for stage in self.components.values() for c in stage.values()]
        entries += [(link.provider, target) for link in self.links.values() for target in link.targets]
        entries += [(s.provider, s.resolver) for s in self.model_sources.values()]
        entries += [(t.provider, target) for t in self.tasks.values() for target in t.methods.values()]
        found = []
        for provider, target in entries:
            try:
                import_target(target)
            except Exception as exc:  # noqa: BLE001 - report whatever the import raised
                found.append(Problem(provider, f"import path {target!r} failed: {exc!r}"))
        return found
