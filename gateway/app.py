"""The FastAPI application: ``/ws``, ``/healthz``, ``/readyz``, ``/metrics`` and the web client."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI, Response
from fastapi.staticfiles import StaticFiles
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from starlette.types import ASGIApp, Receive, Scope, Send
from starlette.websockets import WebSocket

from relaybus.gateway.auth import check_anonymous_bind
from relaybus.gateway.delivery.wsio import sink_for
from relaybus.gateway.push.routes import router as push_router
from relaybus.gateway.runtime import Runtime
from relaybus.gateway.web.endpoint import Endpoint
from relaybus.gateway.web.security import HostCheck, HostPolicy, SecurityHeaders
from relaybus.shared import __version__
from relaybus.shared.settings import Settings

STATIC_DIR = Path(__file__).parent / "static"


class WebSocketRoute:
    """Pure ASGI middleware that serves one WebSocket path with the server's raw ``send``."""

    def __init__(self, app: ASGIApp, *, path: str, endpoint: Endpoint) -> None:
        self.app = app
        self.path = path
        self.endpoint = endpoint

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket" and scope["path"] == self.path:
            ws = WebSocket(scope, receive, send)
            await self.endpoint(ws, sink_for(ws, send, self.endpoint.config.write_timeout_s))
            return
        await self.app(scope, receive, send)


def create_app(
    settings: Settings,
    registry: CollectorRegistry | None = None,
    *,
    runtime: Runtime | None = None,
) -> FastAPI:
    """Build the app. Token configuration is checked here, so a bad one fails at start."""
    check_anonymous_bind(settings)
    reg = registry if registry is not None else CollectorRegistry()
    rt = runtime if runtime is not None else Runtime(settings, reg)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with rt:
            yield

    app = FastAPI(
        title="relaybus gateway",
        version=__version__,
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )

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

    app.include_router(push_router(rt.push))

    # /ws is served ahead of the middleware stack so frames can be written in bursts
    # (relaybus.gateway.delivery.wsio); everything else goes through FastAPI.
    app.add_middleware(WebSocketRoute, path="/ws", endpoint=rt.endpoint)
    app.add_middleware(
        HostCheck,
        policy=HostPolicy.from_settings(settings),
        refused=rt.metrics.auth_failures.inc,
    )
    app.add_middleware(SecurityHeaders)
    if STATIC_DIR.is_dir():
        app.mount("/", StaticFiles(directory=STATIC_DIR, html=True), name="static")
    return app
