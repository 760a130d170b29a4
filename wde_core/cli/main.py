"""The ``wde`` command line: a click group with the core's own commands (defined here, on it) and those plugins add through ``wde_register_commands``."""

from __future__ import annotations

import json
import logging
import sys
import textwrap
from contextlib import contextmanager
from typing import Any

import click

from wde_core.cli.hints import cli_words, missing_command
from wde_core.plugins.entries import STAGES
from wde_core.plugins.host import get_plugin_host


class WdeGroup(click.Group):
    """The ``wde`` group: a command that a known plugin provides says how to install it, and the engine's
    errors speak the command line's words (options, ``wde CMD``)."""

    def resolve_command(self, ctx, args):
        """Resolve ``args[0]``, or name the plugin that provides the missing command."""
        if args and self.get_command(ctx, args[0]) is None and (hint := missing_command(args[0], get_plugin_host())):
            raise click.ClickException(hint)
        return super().resolve_command(ctx, args)

    def invoke(self, ctx):
        """Run the command; a one-line error is reworded for the command line."""
        try:
            return super().invoke(ctx)
        except click.ClickException as exc:
            if not isinstance(exc, click.UsageError):
                exc.message = cli_words(exc.message, ctx.invoked_subcommand, self.commands)
            raise


@click.group(cls=WdeGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="wde-core", message="wde-core %(version)s")
def cli() -> None:
    """wde: the Workflow Defined Engine for embedding, reranking and other prefill-only models."""


def main(argv: list[str] | None = None) -> Any:
    """Entry point of the ``wde`` script: load plugins, let them add commands, run."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    host = get_plugin_host()
    host.register_commands(cli)
    return cli.main(args=argv, prog_name="wde")


def emit_json(data: Any) -> None:
    """Print ``data`` as indented JSON."""
    click.echo(json.dumps(data, indent=2, default=str))


def print_table(rows: list[dict[str, Any]], columns: list[str]) -> None:
    """Print ``rows`` as an aligned text table with the given columns."""
    cells = [[str(row.get(c, "")) for c in columns] for row in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    click.echo("  ".join(c.upper().ljust(w) for c, w in zip(columns, widths)).rstrip())
    for r in cells:
        click.echo("  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip())


def print_problems(problems) -> None:
    """Print plugin problems to stderr, one per line."""
    for problem in problems:
        click.echo(f"problem: {problem}", err=True)


def workflows_data() -> list[dict[str, Any]]:
    """Every workflow with its components, their providers and the architectures linked to it."""
    registry = get_plugin_host().registry
    data = []
    for wf in sorted(registry.workflows.values(), key=lambda w: w.name):
        stages = {}
        for stage, name in wf.stages().items():
            component = registry.components[stage].get(name) if name else None
            stages[stage] = {"component": name or "(auto)", "provider": component.provider if component else ""}
        links = [{"architecture": link.architecture, "task": link.task, "variant": link.variant, "model": link.model,
                  "provider": link.provider}
                 for link in sorted(registry.links.values(), key=lambda item: item.key) if link.workflow == wf.name]
        data.append({"workflow": wf.name, "provider": wf.provider, "description": wf.description,
                     "stages": stages, "architectures": links})
    return data


engine_arg_option = click.option(
    "--engine-arg", "engine_args", multiple=True, metavar="KEY=VALUE",
    help="Any other engine argument (a workflow's own too); VALUE is read as JSON, else as text.")


@contextmanager
def engine_error():
    """Turn the engine's errors (a bad model, argument or input) into one-line command-line errors."""
    try:
        yield
    except (LookupError, ValueError, TypeError, OSError) as exc:
        raise click.ClickException(str(exc)) from None


def parse_engine_args(pairs: tuple[str, ...]) -> dict[str, Any]:
    """``("enable_bidirectional=true", "pooling=mean")`` -> keyword arguments (JSON values, else text)."""
    parsed: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{pair!r}: expected KEY=VALUE", param_hint="--engine-arg")
        try:
            parsed[key] = json.loads(value)
        except json.JSONDecodeError:
            parsed[key] = value
    return parsed


@cli.command("list-workflows")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.option("--check", is_flag=True, help="Also import every registered component and model class.")
def list_workflows(as_json: bool, check: bool) -> None:
    """List workflows, their stage components (and providers) and the architectures linked to them."""
    host = get_plugin_host()
    data = workflows_data()
    problems = host.problems + (host.registry.check_imports() if check else [])
    if as_json:
        emit_json({"workflows": data, "problems": [str(p) for p in problems]})
    else:
        for wf in data:
            click.echo(f"workflow {wf['workflow']}  (from {wf['provider']})  {wf['description']}")
            print_table([{"stage": s, **v} for s, v in wf["stages"].items()], ["stage", "component", "provider"])
            if wf["architectures"]:
                click.echo("linked architectures:")
                print_table(wf["architectures"], ["architecture", "task", "variant", "provider"])
            else:
                click.echo("linked architectures: none")
            click.echo("")
        print_problems(problems)
    if check and not as_json:
        click.echo(checked_line(host.registry, problems))
    if check and problems:
        sys.exit(1)


def checked_line(registry, problems) -> str:
    """What ``--check`` imported, and whether every import resolved."""
    components = sum(len(stage) for stage in registry.components.values())
    what = (f"checked {len(registry.workflows)} workflows, {components} components, {len(registry.links)} "
            f"architecture links, {len(registry.model_sources)} model sources and {len(registry.tasks)} tasks")
    return f"{what}: all imports resolve" if not problems else f"{what}: {len(problems)} problem(s) above"


def tasks_data() -> list[dict[str, Any]]:
    """Every task with its front-end methods, inputs, description and the architecture links that serve it."""
    registry = get_plugin_host().registry
    data = []
    for task in sorted(registry.tasks.values(), key=lambda t: t.name):
        links = sorted((link for link in registry.links.values() if link.task in task.link_tasks),
                       key=lambda link: link.key)
        data.append({"task": task.name, "provider": task.provider, "methods": list(task.methods),
                     "inputs": task.inputs, "description": task.description, "served_by": list(task.link_tasks),
                     "workflows": sorted({link.workflow for link in links}),
                     "architectures": [{"architecture": link.architecture, "task": link.task, "variant": link.variant,
                                        "workflow": link.workflow, "provider": link.provider} for link in links]})
    return data


@cli.command("list-tasks")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def list_tasks(as_json: bool) -> None:
    """List tasks, their front-end methods and inputs, and the architectures (and workflows) that serve them."""
    host = get_plugin_host()
    data = tasks_data()
    if as_json:
        emit_json({"tasks": data, "problems": [str(p) for p in host.problems]})
        return
    print_table([{**t, "methods": ", ".join(t["methods"])} for t in data],
                ["task", "methods", "provider", "inputs", "description"])
    groups: dict[tuple[str, ...], list[dict[str, Any]]] = {}  # tasks served by the same link tasks, together
    for t in data:
        groups.setdefault(tuple(t["served_by"]), []).append(t)
    for served_by, tasks in groups.items():
        archs = sorted({link["architecture"] for link in tasks[0]["architectures"]})
        click.echo(f"\n{', '.join(t['task'] for t in tasks)}: served by the models linked for {' or '.join(served_by)}")
        for line in (f"workflows: {', '.join(tasks[0]['workflows']) or 'none'}",
                     f"architectures: {', '.join(archs) or 'none'}"):
            click.echo(textwrap.fill(line, 110, initial_indent="  ", subsequent_indent="    ", break_on_hyphens=False))
    print_problems(host.problems)


@cli.command("plugins")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def plugins(as_json: bool) -> None:
    """List installed plugins: name, distribution, version and the hooks each implements."""
    host = get_plugin_host()
    rows = [{"name": p.name, "distribution": p.distribution, "version": p.version, "hooks": p.hooks}
            for p in sorted(host.plugins.values(), key=lambda p: p.name)]
    if as_json:
        emit_json({"plugins": rows, "problems": [str(p) for p in host.problems]})
        return
    print_table([{**r, "hooks": ", ".join(h.removeprefix("wde_") for h in r["hooks"])} for r in rows],
                ["name", "distribution", "version", "hooks"])
    print_problems(host.problems)


@cli.command("inspect")
@click.argument("model", required=False)
@click.option("--task", default=None, help="Task to serve (embed, rerank, ...).")
@click.option("--device", default="auto", show_default=True)
@click.option("--dtype", default="auto", show_default=True)
@click.option("--attention-backend", default=None)
@engine_arg_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def inspect(model: str | None, task, device, dtype, attention_backend, engine_args, as_json: bool) -> None:
    """Show the pipeline that would be assembled for MODEL, and why, without loading weights."""
    from wde_core.assembly.pipeline import assemble_pipeline

    with engine_error():
        pipeline = assemble_pipeline(model, task=task, device=device, dtype=dtype,
                                     attention_backend=attention_backend, **parse_engine_args(engine_args))
    info = pipeline.describe()
    if as_json:
        emit_json(info)
        return
    shown = ("model", "path", "found_by", "architecture", "task", "workflow", "model_class", "device", "dtype",
             "pooling", "normalize", "max_model_len", "max_num_batched_tokens", "causal", "position_offset",
             "activation", "long_inputs")
    for key in shown:
        why = info["reasons"].get(key, "")
        click.echo(f"{key:>22}: {info[key]}" + (f"   ({why})" if why else ""))
    for key, why in info["reasons"].items():  # what plugins decided beyond the core's settings
        if key not in shown and key not in STAGES:
            click.echo(f"{key:>22}: {why}")
    print_table([{"stage": s, **info["stages"][s], "why": info["reasons"].get(s, "")} for s in STAGES],
                ["stage", "component", "provider", "why"])
