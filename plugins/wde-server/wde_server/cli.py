"""``wde serve``: load the models, warm them up, then open the port; SIGTERM/SIGINT drain and exit 0."""

from __future__ import annotations

import signal

import click

from wde_core.plugin_api import parse_engine_args


@click.command("serve")
@click.argument("models", nargs=-1)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on (0.0.0.0: every one).")
@click.option("--port", default=8080, show_default=True, type=int)
@click.option("--served-model-name", "names", multiple=True,
              help="Name clients use for the model at the same position (default: the model as given).")
@click.option("--engine-arg", "engine_args", multiple=True, metavar="KEY=VALUE",
              help="An engine argument for every model (as in wde inspect); VALUE is read as JSON, else as text.")
@click.option("--max-client-batch-size", default=2048, show_default=True, type=int,
              help="Most inputs in one request (more: 413).")
@click.option("--payload-limit", default=2_000_000, show_default=True, type=int,
              help="Largest request body in bytes (more: 413).")
@click.option("--max-concurrent-requests", default=512, show_default=True, type=int,
              help="Inference requests served at once (more: 429 with Retry-After).")
@click.option("--api-key", envvar="WDE_API_KEY", default=None,
              help="Require 'Authorization: Bearer KEY' on every inference route (env WDE_API_KEY).")
@click.option("--protect-all", is_flag=True, help="Also require the key on /health, /metrics and /docs.")
@click.option("--auto-truncate", is_flag=True,
              help="Cut over-long inputs where the request does not say (default: refuse them, 422).")
@click.option("--calibration", type=click.Path(exists=True, dir_okay=False), default=None,
              help="Texts (.txt lines or .jsonl 'text') whose embeddings set the int8/uint8 ranges.")
@click.option("--log-level", default="info", show_default=True,
              type=click.Choice(["critical", "error", "warning", "info", "debug"]))
@click.option("--ray", "on_ray", is_flag=True, help="Serve through Ray Serve, in --replicas replicas (needs wde-ray).")
@click.option("--replicas", default=1, show_default=True, type=click.IntRange(min=1), help="With --ray: replicas.")
@click.option("--address", default=None, help="With --ray: the Ray cluster to join (default: RAY_ADDRESS, else a "
                                              "local Ray).")
def serve(models, host, port, names, engine_args, max_client_batch_size, payload_limit, max_concurrent_requests,
          api_key, protect_all, auto_truncate, calibration, log_level, on_ray, replicas, address) -> None:
    """Serve MODELS (default: the embedded default model) over HTTP: OpenAI, Cohere, Jina, TEI and vLLM
    routes; a request's `model` field (TEI routes: ?model=) picks the model. Docs at /docs."""
    import uvicorn

    from wde_server.app import create_app
    from wde_server.options import ServerOptions

    if len(names) > max(len(models), 1):
        raise click.BadParameter(f"{len(names)} names for {max(len(models), 1)} model(s)",
                                 param_hint="--served-model-name")
    try:
        options = ServerOptions(max_client_batch_size=max_client_batch_size, payload_limit=payload_limit,
                                max_concurrent_requests=max_concurrent_requests, api_key=api_key,
                                protect_all=protect_all, auto_truncate=auto_truncate, calibration=calibration)
        if on_ray or replicas > 1 or address:
            return serve_on_ray(models, names, options, parse_engine_args(engine_args), on_ray=on_ray,
                                replicas=replicas, address=address, host=host, port=port)
        app = create_app(list(models) or [None], options, served_model_names=names,
                         **parse_engine_args(engine_args))
    except (LookupError, ValueError, TypeError, OSError) as exc:
        raise click.ClickException(str(exc)) from None
    # uvicorn re-raises the signal that stopped it once it has drained; a handler that ignores the
    # re-raised signal lets the command exit 0 after a graceful stop
    for stop in (signal.SIGTERM, signal.SIGINT):
        signal.signal(stop, lambda *_: None)
    uvicorn.run(app, host=host, port=port, log_level=log_level, timeout_graceful_shutdown=None,
                limit_concurrency=None, access_log=False)


def serve_on_ray(models, names, options, engine_args, *, on_ray, replicas, address, host, port) -> None:
    """``wde serve --ray``: the same app as a Ray Serve deployment of ``replicas`` replicas (``wde_ray.serve_app``)."""
    if not on_ray:
        raise click.UsageError("--replicas and --address serve through Ray: add --ray")
    try:
        from wde_ray import serve as ray_serve
    except ImportError as exc:
        raise click.ClickException(f"--ray needs the wde-ray plugin and Ray: pip install wde-ray ({exc})") from None
    from dataclasses import asdict

    app = ray_serve.serve_app(list(models) or [None], num_replicas=replicas, served_model_names=names,
                              **asdict(options), **engine_args)
    ray_serve.run(app, host=host, port=port, address=address)
