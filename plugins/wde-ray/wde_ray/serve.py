"""Online serving on Ray Serve: :func:`serve_app` wraps wde-server's ``create_app`` as a deployment whose
replicas each build the same app (same routes, limits and errors as ``wde serve``); :func:`run` starts it
(``wde serve-ray``)."""

from __future__ import annotations

import dataclasses
import signal
import threading
from typing import Any, Sequence

from ray import serve

from wde_ray.batch import actor_engine_args

REPLICA_HEADER = "x-wde-replica"
APP_NAME = "wde"


@serve.ingress()
class WdeReplica:
    """One replica: ``create_app`` built in the replica's process (models loaded and warmed up there)."""

    def __init__(self, models: list[str | None], options: dict[str, Any], names: list[str | None],
                 engine_args: dict[str, Any]) -> None:
        self.models, self.options, self.names, self.engine_args = models, options, names, engine_args

    def __serve_build_asgi_app__(self) -> Any:
        """The ``wde serve`` app, each response naming the replica that answered in ``x-wde-replica``."""
        from wde_server.public import ServerOptions, create_app

        app = create_app(self.models, ServerOptions(**self.options), served_model_names=self.names,
                         **self.engine_args)
        app.add_middleware(ReplicaHeader, replica=serve.get_replica_context().replica_id.unique_id)
        return app


class ReplicaHeader:
    """ASGI middleware adding ``x-wde-replica: <replica id>`` to every HTTP response."""

    def __init__(self, app: Any, replica: str) -> None:
        self.app, self.header = app, (REPLICA_HEADER.encode(), replica.encode())

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)

        async def send_with_header(message: dict) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), self.header]
            await send(message)

        await self.app(scope, receive, send_with_header)


def split_options(kwargs: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(server options, engine arguments)``: the ``ServerOptions`` fields, and everything else."""
    from wde_server.public import ServerOptions

    fields = {f.name for f in dataclasses.fields(ServerOptions)}
    return ({k: v for k, v in kwargs.items() if k in fields}, {k: v for k, v in kwargs.items() if k not in fields})


def serve_app(models: Sequence[str | None] = (None,), *, num_replicas: int = 1,
              autoscaling_config: dict[str, Any] | None = None, num_cpus: float = 1, num_gpus: float = 0,
              served_model_names: Sequence[str | None] = (), max_ongoing_requests: int | None = None,
              **server_options: Any) -> Any:
    """A Ray Serve application of ``wde serve`` for ``models``: ``num_replicas`` replicas (or
    ``autoscaling_config``), each with ``num_cpus``/``num_gpus``. ``server_options`` are ``ServerOptions`` fields
    (``api_key``, ``max_client_batch_size``, ...) and engine arguments; pass it to ``serve.run``."""
    options, engine_args = split_options(server_options)
    from wde_server.public import ServerOptions

    ServerOptions(**options)  # refuse bad limits here, not in every replica
    scale = {"autoscaling_config": autoscaling_config} if autoscaling_config else {"num_replicas": num_replicas}
    deployment = serve.deployment(WdeReplica, name="WdeServer", ray_actor_options={
        "num_cpus": num_cpus, "num_gpus": num_gpus}, **scale,
        max_ongoing_requests=max_ongoing_requests or options.get("max_concurrent_requests", 512))
    return deployment.bind(list(models) or [None], options, list(served_model_names),
                           actor_engine_args(engine_args, num_cpus, num_gpus))


def run(app: Any, *, host: str, port: int, address: str | None) -> None:
    """Start ``app`` on the cluster at ``address`` (else a local Ray) with Serve's proxy on ``host:port``; block
    until SIGTERM/SIGINT, then delete the application (and stop the local Ray)."""
    import ray

    ray.init(address=address or None, include_dashboard=False, log_to_driver=False)
    try:
        serve.start(http_options={"host": host, "port": port})
        serve.run(app, name=APP_NAME, route_prefix="/", blocking=False)
        print(f"wde: serving on http://{host}:{port} through Ray Serve", flush=True)
        stop = threading.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
        while not stop.wait(0.5):
            pass
        serve.delete(APP_NAME)
        if not address:
            serve.shutdown()
    finally:
        ray.shutdown()
