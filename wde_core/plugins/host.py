"""Loading plugins: the core's built-ins, then every ``wde`` entry point (only those ``WDE_PLUGINS`` names,
when set), lazily and once. A plugin that fails to import, implements an unknown hook or raises while
registering is reported by name; the others keep working."""

from __future__ import annotations

import difflib
import functools
import importlib
import json
import logging
import os
from dataclasses import dataclass, field
from functools import partial
from importlib import metadata, resources
from typing import Any, Callable, Iterable, Iterator

import pluggy

from wde_core.plugins import hookspecs
from wde_core.plugins.entries import STAGES, Problem
from wde_core.plugins.registry import Registry
from wde_core.plugins.trace import trace_hook_calls

logger = logging.getLogger("wde")

ENTRY_POINT_GROUP = "wde"
ALLOWLIST_ENV = "WDE_PLUGINS"
CORE_PLUGIN_NAME = "wde-core"
STAGE_HOOKS = {stage: "wde_register_engine_args" if stage == "engine_args" else f"wde_register_{stage}s"
               for stage in STAGES}


@functools.lru_cache(maxsize=1)
def plugin_hints() -> dict[str, Any]:
    """Which known distribution provides an architecture, a command (``commands``) or a component (``components``)."""
    return json.loads(resources.files("wde_core.plugins").joinpath("hints.json").read_text())


@dataclass
class PluginInfo:
    """An installed plugin: its name, the distribution that ships it, its version and its hooks."""

    name: str
    distribution: str
    version: str
    hooks: list[str] = field(default_factory=list)


class PluginHost:
    """Owns the pluggy manager and the registry filled from every loaded plugin."""

    def __init__(self, *, use_entry_points: bool = True) -> None:
        self.pm = pluggy.PluginManager(hookspecs.PROJECT_NAME)
        self.pm.add_hookspecs(hookspecs)
        trace_hook_calls(self.pm)
        self.use_entry_points = use_entry_points
        self.registry = Registry()
        self.plugins: dict[str, PluginInfo] = {}
        self.problems: list[Problem] = []  # plugins that failed to load, refused registrations, dangling names
        self.filtered_out: dict[str, str] = {}  # entry-point name -> distribution, left out by WDE_PLUGINS
        self._loaded = False
        self._command_groups: list = []

    @property
    def hook(self):
        """The pluggy hook relay, for ``firstresult`` and notification hooks."""
        return self.pm.hook

    def load(self, extra_plugins: Iterable[tuple[str, Any]] = ()) -> "PluginHost":
        """Register built-ins, entry points and ``extra_plugins`` (name, object), then collect."""
        if self._loaded:
            return self
        self._loaded = True
        builtin = importlib.import_module("wde_core.builtin")
        self._register(CORE_PLUGIN_NAME, builtin, CORE_PLUGIN_NAME, _version_of(CORE_PLUGIN_NAME))
        if self.use_entry_points:
            self._load_entry_points()
        for name, obj in extra_plugins:
            self._register(name, obj, "(in process)", "")
        self._collect()
        return self

    def component(self, stage: str, name: str, *, needed_by: str = ""):
        """The registered component; a ``LookupError`` naming the alternatives and, when a known plugin provides
        the missing one, how to get it."""
        try:
            return self.registry.component(stage, name, needed_by=needed_by)
        except LookupError as exc:
            dist = plugin_hints()["components"].get(name)
            if dist is None:
                raise
            raise LookupError(f"{exc}; the {dist} plugin provides it{self.install_hint(dist)}") from None

    def install_hint(self, dist: str) -> str:
        """How to get distribution ``dist``'s plugin: allow it in ``WDE_PLUGINS``, see why it failed, or install it."""
        if dist in self.filtered_out.values():
            allow = os.environ.get(ALLOWLIST_ENV, "")
            return f", installed but left out by {ALLOWLIST_ENV}={allow!r}: add its entry point to {ALLOWLIST_ENV}"
        failed = next((p.message for p in self.problems if p.plugin == dist), None)
        return f", which failed to load: {failed}" if failed else f": pip install {dist}"

    def _load_entry_points(self) -> None:
        allow = os.environ.get(ALLOWLIST_ENV)
        allowed = None if allow is None else {n.strip() for n in allow.split(",") if n.strip()}
        entry_points = sorted(metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name)
        for name in sorted((allowed or set()) - {ep.name for ep in entry_points}):
            self._fail(name, f"named in {ALLOWLIST_ENV} but no installed plugin has that entry-point name")
        for ep in entry_points:
            dist = ep.dist.name if ep.dist else "?"
            if allowed is not None and ep.name not in allowed:
                self.filtered_out[ep.name] = dist
                continue
            version = ep.dist.version if ep.dist else ""
            try:
                plugin = ep.load()
            except Exception as exc:  # noqa: BLE001 - a broken plugin must not break the others
                self._fail(ep.name, f"failed to load {ep.value!r} from {dist}: {exc!r}")
                continue
            self._register(ep.name, plugin, dist, version)

    def _register(self, name: str, plugin: Any, dist: str, version: str) -> None:
        existing = self.pm.get_plugin(name)
        if existing is not None and existing is not plugin:
            owner = self.plugins[name].distribution if name in self.plugins else "?"
            self._fail(name, f"duplicate plugin name: already provided by {owner}, refused from {dist}")
            return
        if existing is None:
            try:
                self.pm.register(plugin, name=name)
            except Exception as exc:  # noqa: BLE001 - pluggy validation errors
                self._fail(name, f"rejected by the plugin manager: {exc}")
                return
            if not self._hooks_known(name, plugin):
                return
        hooks = sorted(h.name for h in self.pm.get_hookcallers(plugin) or [])
        if not hooks:
            self.pm.unregister(plugin)
            self._fail(name, f"{getattr(plugin, '__name__', plugin)!r} from {dist} implements no wde hook (functions "
                             "named wde_* marked with wde_core.plugin_api.hookimpl); plugin not loaded")
            return
        self.plugins.setdefault(name, PluginInfo(name, dist, version)).hooks = hooks

    def _hooks_known(self, name: str, plugin: Any) -> bool:
        """pluggy's ``check_pending``: a hook implementation with no wde spec (a misspelt hook name)
        refuses the whole plugin, reported with the unknown name and the closest wde hook."""
        try:
            self.pm.check_pending()
        except pluggy.PluginValidationError as exc:
            self.pm.unregister(plugin)
            unknown = [n for n in dir(plugin) if n.startswith("wde_") and not hasattr(hookspecs, n)
                       and self.pm.parse_hookimpl_opts(plugin, n) is not None]
            hints = [f"{n!r}" + _closest_hook(n) for n in unknown] or [str(exc)]
            self._fail(name, f"implements unknown hook(s) {', '.join(hints)}; plugin not loaded")
            return False
        return True

    def _fail(self, plugin: str, message: str) -> None:
        logger.warning("wde plugin %s: %s", plugin, message)
        self.problems.append(Problem(plugin, message))

    def _collect(self) -> None:
        reg = self.registry
        self._call_register("wde_register_tasks", reg.add_task)
        for stage, hook_name in STAGE_HOOKS.items():
            self._call_register(hook_name, partial(reg.add_component, stage))
        self._call_register("wde_register_workflows", reg.add_workflow)
        self._call_register("wde_register_architectures", reg.add_link)
        self._call_register("wde_register_model_sources", reg.add_model_source)
        for problem in reg.check_references():
            self._fail(problem.plugin, problem.message)

    def register_commands(self, group) -> None:
        """Let each plugin add ``wde`` commands (once per group); a name already taken is refused."""
        if any(done is group for done in self._command_groups):
            return
        self._command_groups.append(group)
        owners = {name: CORE_PLUGIN_NAME for name in group.commands}  # the core defines its own on the group
        for plugin, call in self._each_plugin("wde_register_commands"):
            before = dict(group.commands)
            try:
                call(cli=group)
            except Exception as exc:  # noqa: BLE001 - the plugin is reported, the others go on
                self._fail(plugin, f"wde_register_commands raised {exc!r}")
            for name, command in list(group.commands.items()):
                if name in before and before[name] is not command:
                    group.commands[name] = before[name]
                    self._fail(plugin, f"duplicate command {name!r}: already provided by {owners.get(name, '?')!r}, "
                                       "refused")
                elif name not in before:
                    owners[name] = plugin

    def _call_register(self, hook_name: str, add: Callable) -> None:
        """Call one registration hook plugin by plugin, its ``register(...)`` calling ``add(plugin_name, ...)``."""
        for plugin, call in self._each_plugin(hook_name):
            try:
                call(register=self._reporting(partial(add, plugin), plugin, hook_name))
            except Exception as exc:  # noqa: BLE001 - the plugin is reported, the others go on
                self._fail(plugin, f"{hook_name} raised {exc!r}")

    def _each_plugin(self, hook_name: str) -> Iterator[tuple[str, Callable]]:
        """``(plugin_name, caller)`` for each plugin implementing ``hook_name``: pluggy's caller of that plugin's
        implementation alone (wrappers kept), so each call goes through pluggy and is attributed to its plugin."""
        impls = [i for i in getattr(self.pm.hook, hook_name).get_hookimpls() if not (i.hookwrapper or i.wrapper)]
        for name, plugin in dict((i.plugin_name, i.plugin) for i in impls).items():  # a plugin may have several
            yield name, self.pm.subset_hook_caller(hook_name, [i.plugin for i in impls if i.plugin is not plugin])

    def _reporting(self, add: Callable, plugin: str, hook_name: str) -> Callable:
        """``add``, except that a refused registration is reported and the plugin goes on."""

        def register(*args, **kwargs) -> None:
            try:
                add(*args, **kwargs)
            except (ValueError, TypeError) as exc:
                self._fail(plugin, f"{hook_name}: {exc}")

        return register


def _closest_hook(name: str) -> str:
    specs = [n for n in dir(hookspecs) if n.startswith("wde_")]
    close = difflib.get_close_matches(name, specs, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _version_of(distribution: str) -> str:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "(source tree)"


_host: PluginHost | None = None


def get_plugin_host() -> PluginHost:
    """Return the process-wide plugin host, loading plugins on first use."""
    global _host
    if _host is None:
        _host = PluginHost().load()
    return _host


def reset_plugin_host(host: PluginHost | None = None) -> None:
    """Replace (or drop, with ``None``) the process-wide host; for tests and embedding apps."""
    global _host
    _host = host
