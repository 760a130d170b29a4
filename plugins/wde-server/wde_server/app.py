"""``create_app``: the FastAPI app serving one or more models, importable for mounting and testing."""

from __future__ import annotations

import asyncio
import logging
import time
from contextlib import asynccontextmanager
from typing import Any, Sequence

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST

from wde_server import __version__
from wde_server.errors import install_error_handlers
from wde_server.images import IMAGE_ROUTES, tiny_png
from wde_server.keys import KeyRing
from wde_server.metrics import Metrics
from wde_server.middleware import ServerMiddleware
from wde_server.models import ModelSet, ServedModel, load_model, read_calibration
from wde_server.options import ServerOptions
from wde_server.process import trim_periodically
from wde_server.routes import cohere, openai, tei, tokens

log = logging.getLogger("uvicorn.error")

TRIM_SECONDS = 10.0  # how often `wde serve` returns free heap pages to the system

# one short call per task (embed: see start_models), run before the port opens so the first client does not pay
# for warm-up
WARM_UP = {"rerank": ("score", ([("warm up", "warm up")],)),
           "classify": ("classify", (["warm up"],))}


def create_app(models: Sequence[ServedModel | str | None] = (None,), options: ServerOptions | None = None,
               *, served_model_names: Sequence[str | None] = (), **engine_args: Any) -> FastAPI:
    """The app serving ``models``: model names/paths (``None``: the default model) are loaded here with
    ``engine_args``; already built :class:`ServedModel` objects are used as they are.

    Models are warmed up (and calibrated, with ``options.calibration``) when the app starts, and their
    engines closed, after the requests in flight, when it stops.
    """
    options = options or ServerOptions()
    names = list(served_model_names) + [None] * (len(models) - len(served_model_names))
    served = ModelSet([m if isinstance(m, ServedModel) else load_model(m, name, engine_args)
                       for m, name in zip(models, names)])
    metrics = Metrics()

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        await start_models(served, options, metrics)
        trims = getattr(app.state, "allocator", None) is not None  # set by `wde serve`, which owns its process
        trimmer = asyncio.create_task(trim_periodically(TRIM_SECONDS)) if trims else None
        yield
        if trimmer is not None:
            trimmer.cancel()
        await served.close()

    keys = KeyRing.from_options(options.api_key, options.key_file)
    # redirect_slashes=False: no 307 whose Location would echo the request's Host header
    app = FastAPI(title="wde", version=__version__, lifespan=lifespan, redirect_slashes=False,
                  description="Embeddings, reranking and classification with wde: OpenAI, Cohere, Jina, TEI "
                              "and vLLM routes for every served model.")
    app.state.models, app.state.options, app.state.metrics = served, options, metrics
    app.state.started = int(time.time())
    install_error_handlers(app)
    for routes in (openai.router, cohere.router, tei.router, tokens.router):
        app.include_router(routes)
    add_service_routes(app)
    image_routes = IMAGE_ROUTES if any(m.reads_images for m in served) else frozenset()
    app.add_middleware(ServerMiddleware, options=options, metrics=metrics, keys=keys,
                       routes=frozenset(route_paths(app.routes)), image_routes=image_routes)
    return app


def route_paths(routes) -> set[str]:
    """The path templates of ``routes``, those of included routers too (the metrics' route labels)."""
    paths = set()
    for route in routes:
        if hasattr(route, "path"):
            paths.add(route.path)
        elif hasattr(route, "original_router"):
            paths |= route_paths(route.original_router.routes)
    return paths


async def start_models(models: ModelSet, options: ServerOptions, metrics: Metrics) -> None:
    """Warm every model up, calibrate the embedders for int8/uint8, watch their batches."""
    texts = await asyncio.to_thread(read_calibration, options.calibration) if options.calibration else None
    for model in models:
        if model.task == "embed":  # a text and an image, as the model reads them
            items = ["warm up"] * model.reads_texts + [{"image": tiny_png()}] * model.reads_images
            await model.engine.call("encode", items or ["warm up"], output=model.outputs[0])
        elif model.task in WARM_UP:
            method, args = WARM_UP[model.task]
            await model.engine.call(method, *args)
        if texts is not None:
            await model.calibrate(texts)
        metrics.watch(model)
        log.info("wde: model %r (%s) loaded and warmed up", model.name, model.task)


def add_service_routes(app: FastAPI) -> None:
    """``/live``, ``/ready`` (and its older name ``/health``) and ``/metrics``."""

    @app.get("/live", tags=["service"])
    async def live():
        """200 while the server's event loop answers (liveness: restart the process when this fails)."""
        return {"status": "live"}

    @app.get("/ready", tags=["service"])
    @app.get("/health", tags=["service"])
    async def ready(request: Request):
        """200 when every model can serve (readiness); 503 naming the models whose engine or executor died."""
        dead = request.app.state.models.dead()
        if dead:
            return JSONResponse({"error": f"engine of {', '.join(dead)} cannot serve", "error_type": "Unhealthy"},
                                status_code=503)
        return {"status": "ok", "models": [m.name for m in request.app.state.models]}

    @app.get("/metrics", tags=["service"])
    async def metrics(request: Request):
        """Prometheus metrics."""
        return Response(request.app.state.metrics.render(), media_type=CONTENT_TYPE_LATEST)
