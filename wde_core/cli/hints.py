"""The command line's own words: hints for commands that a known plugin provides, install commands (with the
checkout's ``./plugins/...`` when wde runs from a source tree) and Python API words as options and commands."""

from __future__ import annotations

import os
import re
from pathlib import Path

from wde_core.plugins.host import plugin_hints

CHECKOUT = Path(__file__).resolve().parents[2]  # a source checkout has plugins/ beside wde_core/
API_WORDS = ((r"\btruncate=True\b", "--truncate"), (r"\btruncate=False\b", "--no-truncate"),
             (r"\boutput=", "--output-type "), (r"\btop_n=", "--top-n "), (r"\bdimensions=", "--dimensions "),
             (r"\bprompt_name=", "--prompt-name "), (r"\bpass task=", "pass --engine-arg task="))
METHOD_COMMANDS = {"score": "rerank", "classify_tokens": "classify-tokens"}  # front-end methods that a command of another name serves
REQUIREMENT = r"'wde-[\w-]+(?:\[[\w-]+\])?'|wde-[\w-]+"


def missing_command(name: str, host) -> str | None:
    """Why ``wde NAME`` is missing and how to get it, when a known plugin provides it."""
    dist = plugin_hints()["commands"].get(name)
    return None if dist is None else f"wde {name} is provided by the {dist} plugin{host.install_hint(dist)}"


def install_command(*requirements: str) -> str:
    """``pip install REQ...``, plus the checkout's ``pip install ./plugins/...`` when run from a source tree."""
    reqs = [r.strip("'") for r in requirements]
    command = "pip install " + " ".join(map(_quoted, reqs))
    local = [CHECKOUT / "plugins" / re.match(r"[\w-]+", r).group() for r in reqs]
    if not all((folder / "pyproject.toml").is_file() for folder in local):
        return command
    paths = [_shown(folder) + r[len(folder.name):] for folder, r in zip(local, reqs)]
    return f"{command} (from this checkout: pip install {' '.join(map(_quoted, paths))})"


def _shown(folder: Path) -> str:
    relative = os.path.relpath(folder)
    return str(folder) if relative.startswith("..") else "./" + relative


def _quoted(requirement: str) -> str:
    return f"'{requirement}'" if "[" in requirement else requirement


def cli_words(message: str, command: str | None, commands) -> str:
    """An engine error in the command line's words: options for keyword arguments, ``wde CMD`` for methods,
    and install commands with the checkout's path."""
    for pattern, words in API_WORDS:
        message = re.sub(pattern, words, message)
    message = re.sub(r"\buse ((?:\w+\(\)(?:, | and )?)+)", lambda m: "use " + _commands(m.group(1), commands),
                     message)
    if command:
        message = re.sub(r"^\w+\(\) serves", f"wde {command} serves", message)
    return re.sub(rf"pip install ((?:{REQUIREMENT})(?: (?:{REQUIREMENT}))*)",
                  lambda m: install_command(*m.group(1).split()), message)


def _commands(methods: str, commands) -> str:
    names = (METHOD_COMMANDS.get(n, n) for n in re.findall(r"(\w+)\(\)", methods))
    found = dict.fromkeys(f"wde {name}" for name in names if name in commands)
    return " or ".join(found) or f"the Python API's {methods.strip()}"
