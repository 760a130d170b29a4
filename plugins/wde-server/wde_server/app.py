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
from wde_server.metrics import Metrics
from wde_server.middleware import ServerMiddleware
from wde_server.models import ModelSet, ServedModel, load_model, read_calibration
from wde_server.options import ServerOptions
from wde_server.routes import cohere, openai, tei

log = logging.getLogger("uvicorn.error")

# one short call per task, run before the port opens so the first client does not pay for warm-up
WARM_UP = {"embed": ("encode", (["warm up"],)), "rerank": ("score", ([("warm up", "warm up")],)),
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
        yield
        await served.close()

    app = FastAPI(title="wde", version=__version__, lifespan=lifespan,
                  description="Embeddings, reranking and classification with wde: OpenAI, Cohere, Jina, TEI "
                              "and vLLM routes for every served model.")
    app.state.models, app.state.options, app.state.metrics = served, options, metrics
    app.state.started = int(time.time())
    install_error_handlers(app)
    for routes in (openai.router, cohere.router, tei.router):
        app.include_router(routes)
    add_service_routes(app)
    app.add_middleware(ServerMiddleware, options=options, metrics=metrics)
    return app


async def start_models(models: ModelSet, options: ServerOptions, metrics: Metrics) -> None:
    """Warm every model up, calibrate the embedders for int8/uint8, watch their batches."""
    texts = await asyncio.to_thread(read_calibration, options.calibration) if options.calibration else None
    for model in models:
        if model.task in WARM_UP:
            method, args = WARM_UP[model.task]
            await model.engine.call(method, *args)
        if texts is not None:
            await model.calibrate(texts)
        metrics.watch(model)
        log.info("wde: model %r (%s) loaded and warmed up", model.name, model.task)


def add_service_routes(app: FastAPI) -> None:
    """``/health`` and ``/metrics``."""

    @app.get("/health", tags=["service"])
    async def health(request: Request):
        """200 while every model's engine loop runs; 503 naming the models whose loop died."""
        dead = request.app.state.models.dead()
        if dead:
            return JSONResponse({"error": f"engine loop of {', '.join(dead)} died", "error_type": "Unhealthy"},
                                status_code=503)
        return {"status": "ok", "models": [m.name for m in request.app.state.models]}

    @app.get("/metrics", tags=["service"])
    async def metrics(request: Request):
        """Prometheus metrics."""
        return Response(request.app.state.metrics.render(), media_type=CONTENT_TYPE_LATEST)
