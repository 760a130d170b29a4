"""``wde serve``: load the models, warm them up, then open the port; SIGTERM/SIGINT drain and exit 0."""

from __future__ import annotations

import signal

import click

from wde_core.plugin_api import parse_engine_args


# what `wde serve` shares with the commands that serve its app elsewhere (wde-ray's `wde serve-ray`)
SHARED_PARAMETERS = [
    click.argument("models", nargs=-1),
    click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on (0.0.0.0: every one)."),
    click.option("--port", default=8080, show_default=True, type=int),
    click.option("--served-model-name", "names", multiple=True,
                 help="Name clients use for the model at the same position (default: the model as given)."),
    click.option("--engine-arg", "engine_args", multiple=True, metavar="KEY=VALUE",
                 help="An engine argument for every model (as in wde inspect); VALUE is read as JSON, else as text."),
    click.option("--max-client-batch-size", default=2048, show_default=True, type=int,
                 help="Most inputs in one request (more: 413)."),
    click.option("--payload-limit", default=2_000_000, show_default=True, type=int,
                 help="Largest request body in bytes (more: 413)."),
    click.option("--image-payload-limit", default=33_554_432, show_default=True, type=int,
                 help="Largest body in bytes of a request with images, on /v1/embeddings, /v2/embed, /v1/rerank, "
                      "/v2/rerank and /rerank when a served model reads images (more: 413)."),
    click.option("--max-concurrent-requests", default=512, show_default=True, type=int,
                 help="Inference requests served at once (more: 429 with Retry-After)."),
    click.option("--max-request-tokens", default=131_072, show_default=True, type=int,
                 help="Most tokens in one request, all its inputs together (more: 413)."),
    click.option("--max-request-pixels", default=200_000_000, show_default=True, type=int,
                 help="Most pixels in one request, all its images together, read from their headers before any "
                      "is decoded (more: 413)."),
    click.option("--max-output-floats", default=4_194_304, show_default=True, type=int,
                 help="Most floats in one /embed_all response: tokens x dimensions (more: 413)."),
    click.option("--request-timeout", default=None, type=float,
                 help="Seconds a request may take before it is dropped (504); a request's X-Request-Timeout header "
                      "may ask for less. Default: no deadline."),
    click.option("--header-timeout", default=10.0, show_default=True, type=float,
                 help="Seconds a connection may take to send its request headers (then it is closed)."),
    click.option("--body-timeout", default=30.0, show_default=True, type=float,
                 help="Seconds a request may take to send its body (then 408)."),
    click.option("--graceful-timeout", default=30.0, show_default=True, type=float,
                 help="Seconds SIGTERM waits for requests in flight before the server exits anyway."),
    click.option("--key-file", type=click.Path(exists=True, dir_okay=False), default=None,
                 help='JSON {"keys": [{"name", "key", "requests_per_minute", "tokens_per_minute"}]}: named keys, '
                      "each with its own limits."),
    click.option("--api-key", envvar="WDE_API_KEY", default=None,
                 help="Require 'Authorization: Bearer KEY' on every inference route (env WDE_API_KEY)."),
    click.option("--protect-all", is_flag=True, help="Also require the key on /health, /metrics and /docs."),
    click.option("--auto-truncate", is_flag=True,
                 help="Cut over-long inputs where the request does not say (default: refuse them, 422)."),
    click.option("--calibration", type=click.Path(exists=True, dir_okay=False), default=None,
                 help="Texts (.txt lines or .jsonl 'text') whose embeddings set the int8/uint8 ranges."),
]


def server_options(command):
    """Decorator: MODELS and the options of ``wde serve`` that other serving commands share (``--host``,
    ``--port``, names, engine arguments, limits, keys); they reach the command as keyword arguments."""
    for parameter in reversed(SHARED_PARAMETERS):
        command = parameter(command)
    return command


def refuse_moved_ray_flags(ctx, param, value):
    """``--ray``, ``--replicas`` and ``--address`` served through Ray Serve: wde-ray's ``wde serve-ray`` does now."""
    if value not in (None, False):
        raise click.UsageError(f"{param.opts[0]}: serving on Ray moved to wde-ray's command `wde serve-ray` "
                               "(same options, plus --replicas and --address; pip install wde-ray)")


def check_names(models, names) -> None:
    """At most one ``--served-model-name`` per model."""
    if len(names) > max(len(models), 1):
        raise click.BadParameter(f"{len(names)} names for {max(len(models), 1)} model(s)",
                                 param_hint="--served-model-name")


@click.command("serve")
@server_options
@click.option("--log-level", default="info", show_default=True,
              type=click.Choice(["critical", "error", "warning", "info", "debug"]))
@click.option("--workers", default=1, show_default=True, type=click.IntRange(min=1),
              help="Server processes sharing the port (SO_REUSEPORT), each with its own engines: a replica of every "
                   "model per process. More than one where one process's Python limits the throughput (a GPU fed by "
                   "one process); metrics, key quotas and --max-concurrent-requests are per process.")
@click.option("--reuse-port-worker", "worker", is_flag=True, hidden=True)
@click.option("--ray", is_flag=True, hidden=True, expose_value=False, callback=refuse_moved_ray_flags)
@click.option("--replicas", hidden=True, expose_value=False, callback=refuse_moved_ray_flags)
@click.option("--address", hidden=True, expose_value=False, callback=refuse_moved_ray_flags)
def serve(models, host, port, names, engine_args, log_level, workers, worker, **limits) -> None:
    """Serve MODELS (default: the embedded default model) over HTTP: OpenAI, Cohere, Jina, TEI and vLLM
    routes; a request's `model` field (TEI routes: ?model=) picks the model. Docs at /docs."""
    import uvicorn

    from wde_server.app import create_app
    from wde_server.options import ServerOptions
    from wde_server.process import protocol_with_header_timeout, tune_allocator
    from wde_server.workers import check_workers, reuse_port_socket, run_workers

    check_names(models, names)
    check_workers(workers, port)
    if workers > 1:
        raise SystemExit(run_workers(workers, ServerOptions(**limits).graceful_timeout))
    try:
        options = ServerOptions(**limits)
        applied = tune_allocator()  # before the engines' threads start
        app = create_app(list(models) or [None], options, served_model_names=names,
                         **parse_engine_args(engine_args))
        app.state.allocator = applied
    except (LookupError, ValueError, TypeError, OSError) as exc:
        raise click.ClickException(str(exc)) from None
    config = uvicorn.Config(app, host=host, port=port, log_level=log_level, access_log=False, limit_concurrency=None,
                            timeout_graceful_shutdown=options.graceful_timeout,
                            http=protocol_with_header_timeout(options.header_timeout))
    server = uvicorn.Server(config)
    # uvicorn re-raises the signal that stopped it once it has drained: this handler takes that one (the command
    # exits 0 after a graceful stop) and one that comes before uvicorn's own handlers (it then starts and stops at once)
    for stop in (signal.SIGTERM, signal.SIGINT):
        signal.signal(stop, lambda *_: setattr(server, "should_exit", True))
    try:  # as uvicorn.run does, with this worker's shared-port socket where the parent started it
        server.run(sockets=[reuse_port_socket(host, port)] if worker else None)
    except KeyboardInterrupt:
        pass
    if not server.started:
        raise SystemExit(3)  # uvicorn's STARTUP_FAILURE

