"""``wde plugin new``: write the skeleton of a plugin distribution (entry point, link, model, parity test): a text
encoder on the core's embed workflow, with ``--modality image`` a vision tower on wde-clip's image-text one, or with
``--task NAME`` a task of its own (front-end method, output processor, workflow) served by a text encoder."""

from __future__ import annotations

import keyword
import re
from importlib import resources
from pathlib import Path

import click

_DIST_NAME = re.compile(r"^([A-Z0-9]|[A-Z0-9][A-Z0-9._-]*[A-Z0-9])$", re.IGNORECASE)
_METHOD = re.compile(r"^[a-z][a-z0-9_]*$")  # what wde accepts as a front-end method name
# the files written, each from FILE.tmpl under wde_plugin_kit/templates/<modality's folder> ("package/" is the
# import name): text encoders from templates/plugin, vision towers from templates/image
FILES = ("pyproject.toml", "README.md", "package/__init__.py", "package/plugin.py", "package/model.py",
         "tests/test_parity.py")
TEMPLATES = {"text": "plugin", "image": "image"}
# --task: each file and the folder of its template (the model is the text encoder's)
TASK_FILES = {"pyproject.toml": "task", "README.md": "task", "package/__init__.py": "task",
              "package/plugin.py": "task", "package/tasks.py": "task", "package/output.py": "task",
              "package/model.py": "plugin", "tests/test_task.py": "task"}


def package_name(name: str) -> str:
    """The import name of distribution ``name``: lower case, ``-`` and ``.`` turned into ``_``."""
    return re.sub(r"[-.]+", "_", name).lower()


def default_architecture(name: str) -> str:
    """The architecture implied by a distribution name: ``wde-foo-bar`` -> ``FooBarModel``."""
    base = re.sub(r"^wde[-_.]", "", name, flags=re.IGNORECASE)
    return "".join(part[:1].upper() + part[1:] for part in re.split(r"[-_.]+", base) if part) + "Model"


def check_name(name: str) -> str:
    """Return the package name for ``name``; raise ``click.BadParameter`` when it cannot be a distribution."""
    package = package_name(name)
    if not _DIST_NAME.match(name) or not package.isidentifier() or keyword.iskeyword(package):
        raise click.BadParameter(f"{name!r} is not a valid distribution name whose import name is a Python "
                                 f"identifier (letters, digits, '-', '_', '.'; for example 'wde-my-model')",
                                 param_hint="NAME")
    return package


def task_class(task: str) -> str:
    """The class-name stem of task ``task``: ``maxsim`` -> ``Maxsim``, ``token_stats`` -> ``TokenStats``."""
    return "".join(part[:1].upper() + part[1:] for part in task.split("_"))


def check_task(task: str) -> None:
    """Raise ``click.BadParameter`` when ``task`` cannot name a task and its front-end method, or when an installed
    plugin already registers a task, method, workflow or output processor of that name."""
    if not _METHOD.match(task) or keyword.iskeyword(task) or task.startswith(("call", "prepare", "close")):
        raise click.BadParameter(f"{task!r} cannot name a front-end method: lower-case letters, digits and '_', "
                                 f"starting with a letter, not a Python keyword, not starting with 'call', 'prepare' "
                                 f"or 'close' (for example 'maxsim')", param_hint="'--task'")
    from wde_core.plugin_api import AsyncEngine, Engine, get_plugin_host

    registry = get_plugin_host().registry
    taken = registry.tasks.get(task) or registry.method_owner(task)
    if taken is not None:
        raise click.BadParameter(f"{task!r}: the installed plugin {taken.provider!r} already registers the task "
                                 f"{taken.name!r} (methods {', '.join(taken.methods)}); pick another name",
                                 param_hint="'--task'")
    for what, table in (("workflow", registry.workflows),
                        ("output processor", registry.components["output_processor"])):
        if task in table:
            raise click.BadParameter(f"{task!r}: the installed plugin {table[task].provider!r} already registers a "
                                     f"{what} of that name; pick another name", param_hint="'--task'")
    if hasattr(Engine, task) or hasattr(AsyncEngine, task):
        raise click.BadParameter(f"{task!r} is already an attribute of Engine or AsyncEngine; pick another name",
                                 param_hint="'--task'")


def linked_tasks(architecture: str) -> list[str]:
    """The tasks the installed plugins link ``architecture`` for."""
    from wde_core.plugin_api import get_plugin_host

    return sorted({link.task for link in get_plugin_host().registry.links_for(architecture)})


def render(template: str, values: dict[str, str]) -> str:
    """Replace every ``{{key}}`` in ``template`` with ``values[key]``."""
    return re.sub(r"\{\{(\w+)\}\}", lambda m: values[m.group(1)], template)


def write_skeleton(name: str, architecture: str | None = None, directory: str | Path | None = None,
                   modality: str = "text", task: str | None = None) -> list[Path]:
    """Write the plugin distribution ``name`` for ``modality`` (``text`` or ``image``), or with ``task`` the task
    of that name, into ``directory`` (default ``./name``); return the files written."""
    package = check_name(name)
    if task is not None:
        if modality != "text":
            raise click.BadParameter(f"a task's distribution is served by a text encoder; --task does not combine "
                                     f"with --modality {modality}", param_hint="'--task'")
        check_task(task)
    architecture = architecture or default_architecture(name)
    if not architecture.isidentifier() or keyword.iskeyword(architecture):
        raise click.BadParameter(f"{architecture!r} is not a Python identifier (an HF architecture name such "
                                 f"as 'MyModel')", param_hint="'--architecture'")
    target = Path(directory) if directory is not None else Path.cwd() / name
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise click.BadParameter(f"{str(target)!r} already exists and is not an empty directory",
                                 param_hint="'--directory'" if directory is not None else "NAME")
    values = {"name": name, "package": package, "architecture": architecture, "model_class": architecture,
              "task": task or "", "task_class": task_class(task or "")}
    files = TASK_FILES if task is not None else dict.fromkeys(FILES, TEMPLATES[modality])
    templates = resources.files("wde_plugin_kit") / "templates"
    written = []
    for name, folder in files.items():
        path = target / re.sub(r"^package/", f"{package}/", name)
        path.parent.mkdir(parents=True, exist_ok=True)
        template = templates.joinpath(folder, name + ".tmpl").read_text(encoding="utf-8")
        path.write_text(render(template, values), encoding="utf-8")
        written.append(path)
    return written


@click.group("plugin")
def plugin() -> None:
    """Tools for plugin authors."""


@plugin.command("new")
@click.argument("name")
@click.option("--architecture", "-a", default=None,
              help="HF architecture to serve, as in config.json (default: from NAME, wde-foo -> FooModel).")
@click.option("--directory", "-d", type=click.Path(file_okay=False), default=None,
              help="Where to write the distribution (default: ./NAME); must not exist or be empty.")
@click.option("--modality", type=click.Choice(sorted(TEMPLATES)), default="text", show_default=True,
              help="text: an encoder on the embed workflow; image: a vision tower on wde-clip's image-text workflow.")
@click.option("--task", "task", metavar="TASK", default=None,
              help="Add the task TASK instead: its front-end method TASK(), its own output processor and workflow, "
                   "and the architecture linked for it.")
def new(name: str, architecture: str | None, directory: str | None, modality: str, task: str | None) -> None:
    """Write a plugin distribution NAME: pyproject.toml with the entry point, plugin, model, parity test, README
    (with --task, the task's method, output processor and workflow, and a test against HF)."""
    written = write_skeleton(name, architecture, directory, modality, task)
    root = written[0].parent
    for path in written:
        click.echo(f"wrote {path}")
    edit = ["tasks.py", "output.py"] if task is not None else ["model.py"]
    architecture = architecture or default_architecture(name)
    if task is not None and (linked := linked_tasks(architecture)):
        click.echo(f"\nnote: installed plugins also link {architecture} for {', '.join(linked)}: an engine for "
                   f"such a model then needs task={task!r}")
    click.echo(f"\nnext: edit {' and '.join(str(root / package_name(name) / f) for f in edit)}, "
               f"then: cd {root} && pip install -e '.[test]' && pytest")
