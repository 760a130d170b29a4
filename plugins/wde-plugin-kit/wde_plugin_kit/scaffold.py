"""``wde plugin new``: write the skeleton of a plugin distribution (entry point, link, model, parity test): a text
encoder on the core's embed workflow, or with ``--modality image`` a vision tower on wde-clip's image-text one."""

from __future__ import annotations

import keyword
import re
from importlib import resources
from pathlib import Path

import click

_DIST_NAME = re.compile(r"^([A-Z0-9]|[A-Z0-9][A-Z0-9._-]*[A-Z0-9])$", re.IGNORECASE)
# the files written, each from FILE.tmpl under wde_plugin_kit/templates/<modality's folder> ("package/" is the
# import name): text encoders from templates/plugin, vision towers from templates/image
FILES = ("pyproject.toml", "README.md", "package/__init__.py", "package/plugin.py", "package/model.py",
         "tests/test_parity.py")
TEMPLATES = {"text": "plugin", "image": "image"}


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


def render(template: str, values: dict[str, str]) -> str:
    """Replace every ``{{key}}`` in ``template`` with ``values[key]``."""
    return re.sub(r"\{\{(\w+)\}\}", lambda m: values[m.group(1)], template)


def write_skeleton(name: str, architecture: str | None = None, directory: str | Path | None = None,
                   modality: str = "text") -> list[Path]:
    """Write the plugin distribution ``name`` for ``modality`` (``text`` or ``image``) into ``directory`` (default
    ``./name``); return the files written."""
    package = check_name(name)
    architecture = architecture or default_architecture(name)
    if not architecture.isidentifier() or keyword.iskeyword(architecture):
        raise click.BadParameter(f"{architecture!r} is not a Python identifier (an HF architecture name such "
                                 f"as 'MyModel')", param_hint="'--architecture'")
    target = Path(directory) if directory is not None else Path.cwd() / name
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise click.BadParameter(f"{str(target)!r} already exists and is not an empty directory",
                                 param_hint="'--directory'" if directory is not None else "NAME")
    values = {"name": name, "package": package, "architecture": architecture, "model_class": architecture}
    templates = resources.files("wde_plugin_kit") / "templates" / TEMPLATES[modality]
    written = []
    for name in FILES:
        path = target / re.sub(r"^package/", f"{package}/", name)
        path.parent.mkdir(parents=True, exist_ok=True)
        template = templates.joinpath(name + ".tmpl").read_text(encoding="utf-8")
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
def new(name: str, architecture: str | None, directory: str | None, modality: str) -> None:
    """Write a plugin distribution NAME: pyproject.toml with the entry point, plugin, model, parity test, README."""
    written = write_skeleton(name, architecture, directory, modality)
    root = written[0].parent
    for path in written:
        click.echo(f"wrote {path}")
    click.echo(f"\nnext: edit {root / package_name(name) / 'model.py'}, "
               f"then: cd {root} && pip install -e '.[test]' && pytest")
