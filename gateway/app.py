"""The FastAPI application (``/healthz``, ``/readyz``, ``/metrics``, push, the web client) and
the :class:`WsRoute` uvicorn serves ``/ws`` with."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI, Response
from fastapi.staticfiles import StaticFiles
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from relaybus.gateway.auth import check_anonymous_bind
from relaybus.gateway.push.routes import router as push_router
from relaybus.gateway.runtime import Runtime
from relaybus.gateway.web.security import HostCheck, HostPolicy, SecurityHeaders
from relaybus.gateway.web.wsserver import WsRoute
from relaybus.shared import __version__
from relaybus.shared.settings import Settings

STATIC_DIR = Path(__file__).parent / "static"


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

    hosts = HostPolicy.from_settings(settings)
    # /ws is not served here: relaybus.gateway.main gives uvicorn this route's protocol
    # (relaybus.gateway.web.wsserver) for upgrades; FastAPI serves HTTP only.
    app.state.ws_route = WsRoute(
        rt.endpoint,
        hosts,
        rt.metrics.auth_failures.inc,
        write_timeout_s=rt.endpoint.config.write_timeout_s,
        close_timeout_s=rt.endpoint.config.close_timeout_s,
    )
    app.add_middleware(HostCheck, policy=hosts, refused=rt.metrics.auth_failures.inc)
    app.add_middleware(SecurityHeaders)
    if STATIC_DIR.is_dir():
        app.mount("/", StaticFiles(directory=STATIC_DIR, html=True), name="static")
    return app
