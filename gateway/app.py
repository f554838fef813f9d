"""The FastAPI application: ``/ws``, ``/healthz``, ``/readyz``, ``/metrics`` and the web client."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI, Response, WebSocket
from fastapi.staticfiles import StaticFiles
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from gateway.runtime import Runtime
from shared import __version__
from shared.settings import Settings

STATIC_DIR = Path(__file__).parent / "static"


def create_app(
    settings: Settings,
    registry: CollectorRegistry | None = None,
    *,
    runtime: Runtime | None = None,
) -> FastAPI:
    """Build the app. Token configuration is checked here, so a bad one fails at start."""
    reg = registry if registry is not None else CollectorRegistry()
    rt = runtime if runtime is not None else Runtime(settings, reg)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with rt:
            yield

    app = FastAPI(title="relaybus gateway", version=__version__, lifespan=lifespan, docs_url=None,
                  redoc_url=None, openapi_url=None)
    app.state.runtime = rt

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok", "gatewayId": rt.gateway_id}

    @app.get("/readyz")
    async def readyz(response: Response) -> dict[str, str]:
        if await rt.ready():
            return {"status": "ready"}
        response.status_code = 503
        return {"status": "unavailable"}

    @app.get("/metrics")
    async def metrics() -> Response:
        return Response(generate_latest(reg), media_type=CONTENT_TYPE_LATEST)

    @app.websocket("/ws")
    async def ws(websocket: WebSocket) -> None:
        await rt.endpoint(websocket)

    if STATIC_DIR.is_dir():
        app.mount("/", StaticFiles(directory=STATIC_DIR, html=True), name="static")
    return app
