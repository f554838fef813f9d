"""Run the gateway: ``relaybus gateway`` / ``python -m relaybus.gateway`` (``run``), or inside
``relaybus up`` next to the collector (``serve``, stopped by an event)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import ssl
import sys
from collections.abc import Generator

import uvicorn
from fastapi import FastAPI
from prometheus_client import CollectorRegistry

from relaybus.gateway.app import create_app
from relaybus.gateway.auth import AuthConfigError
from relaybus.gateway.runtime import Runtime
from relaybus.gateway.web.guards import (
    MAX_HEADER_BYTES,
    guarded_http,
    install_accept_throttle,
    max_connections,
)
from relaybus.gateway.web.wsserver import WsRoute, websocket_protocol
from relaybus.shared.gctune import tune_gc
from relaybus.shared.preflight import StartupError, check_port
from relaybus.shared.settings import Settings
from relaybus.shared.store.connection import RedisRefused, serve_unless_refused
from relaybus.shared.wire.errors import CloseCode

log = logging.getLogger(__name__)

#: Frames above this many times ``max_frame_bytes`` close the connection (1009).
HARD_CAP_FACTOR = 16


class GatewayStartError(RuntimeError):
    """The server could not start serving (port taken, lifespan failure)."""


#: How often the served certificate's files are looked at (a renewed pair is loaded).
CERT_CHECK_S = 60.0


class _Server(uvicorn.Server):
    """uvicorn without its own signal handlers (the caller's ``stop`` event rules) and without
    its ten wake-ups a second: the main loop refreshes the ``Date`` header once a second, as
    uvicorn does, and otherwise sleeps until ``should_exit`` is set. Every ``cert_check_s``
    it looks at the TLS certificate and key files: a changed pair (renewed by ``relaybus up``
    or by hand) is loaded into the live context, so new connections get it without a restart;
    a pair that does not load (half written, or mismatched) is logged, the old one kept, and
    tried again at the next look."""

    def __init__(self, config: uvicorn.Config, *, cert_check_s: float = CERT_CHECK_S) -> None:
        self._exit = asyncio.Event()
        self.cert_check_s = cert_check_s
        self._cert_stamp: tuple[tuple[int, int], ...] | None = None
        super().__init__(config)

    @property
    def should_exit(self) -> bool:
        return self._exit.is_set()

    @should_exit.setter
    def should_exit(self, value: bool) -> None:
        if value:
            self._exit.set()
        else:
            self._exit.clear()

    async def main_loop(self) -> None:
        loop = asyncio.get_running_loop()
        self._cert_stamp = self._stamp_cert()
        next_check = loop.time() + self.cert_check_s
        # on_tick(0): uvicorn's tick that refreshes the Date header (every tenth of its own).
        while not await self.on_tick(0):
            if loop.time() >= next_check:
                self._reload_cert()
                next_check = loop.time() + self.cert_check_s
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(min(1.0, self.cert_check_s)):
                    await self._exit.wait()

    def _stamp_cert(self) -> tuple[tuple[int, int], ...] | None:
        cfg = self.config
        if cfg.ssl is None or not cfg.ssl_certfile or not cfg.ssl_keyfile:
            return None
        try:
            return tuple(
                (st.st_mtime_ns, st.st_size)
                for st in (os.stat(cfg.ssl_certfile), os.stat(cfg.ssl_keyfile))
            )
        except OSError:
            return None

    def _reload_cert(self) -> None:
        stamp = self._stamp_cert()
        if stamp is None or stamp == self._cert_stamp:
            return
        cfg = self.config
        assert cfg.ssl is not None and cfg.ssl_certfile and cfg.ssl_keyfile
        try:
            cfg.ssl.load_cert_chain(
                str(cfg.ssl_certfile), str(cfg.ssl_keyfile), cfg.ssl_keyfile_password
            )
        except (ssl.SSLError, OSError) as exc:
            log.warning(
                "TLS certificate %s changed but does not load (%s); still serving the "
                "one loaded before, trying again in %.0f s",
                cfg.ssl_certfile,
                exc,
                self.cert_check_s,
            )
            return
        self._cert_stamp = stamp
        log.info("TLS certificate %s reloaded: new connections get it", cfg.ssl_certfile)

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        # uvicorn calls sys.exit() when it cannot bind; a SystemExit raised in a task would
        # escape the event loop itself and take `relaybus up`'s collector down with it.
        try:
            await super().serve(sockets)
        except SystemExit as exc:
            cfg = self.config
            raise GatewayStartError(
                f"gateway failed to start on {cfg.host}:{cfg.port} (see log)"
            ) from exc


def uvicorn_config(settings: Settings, app: FastAPI) -> uvicorn.Config:
    """uvicorn serving ``app`` over HTTP, and ``/ws`` on relaybus's own protocol (the
    :class:`WsRoute` ``create_app`` left in ``app.state.ws_route``)."""
    install_accept_throttle()
    conns = max_connections(settings.max_connections)
    config = uvicorn.Config(
        app,
        host=settings.gateway_host,
        port=settings.gateway_port,
        # h11 with a header deadline and a connection cap (relaybus.gateway.web.guards): a slowloris
        # is cut off after header_timeout_s and can never take every file descriptor.
        http=guarded_http(header_timeout_s=settings.header_timeout_s, max_conns=conns),
        h11_max_incomplete_event_size=MAX_HEADER_BYTES,
        limit_concurrency=conns,
        timeout_keep_alive=5,
        # Replaced below by relaybus.gateway.web.wsserver (its limits come from here).
        ws="none",
        ws_per_message_deflate=False,
        ws_max_size=settings.max_frame_bytes * HARD_CAP_FACTOR,
        lifespan="on",
        log_config=None,
        access_log=False,
        timeout_graceful_shutdown=5,
        # RELAYBUS_TLS_CERT/KEY (or the certificate `relaybus up` made): HTTPS and wss.
        ssl_certfile=settings.tls_cert or None,
        ssl_keyfile=settings.tls_key or None,
    )
    route: WsRoute = app.state.ws_route
    # uvicorn resolves ``ws`` when it loads the config (in serve()): a class is used as is.
    config.ws = websocket_protocol(route, config)
    return config


def warn_if_anonymous(settings: Settings) -> None:
    if settings.allow_anonymous:
        log.warning(
            "RELAYBUS_ALLOW_ANONYMOUS is on: anyone who can reach %s:%d is served without a "
            "token; set RELAYBUS_TOKENS and turn it off unless this network is yours alone",
            settings.gateway_host,
            settings.gateway_port,
        )


async def serve(settings: Settings, stop: asyncio.Event) -> None:
    """Serve until ``stop`` is set, then close every socket with 1012 and shut down."""
    registry = CollectorRegistry()
    runtime = Runtime(settings, registry)
    app = create_app(settings, registry, runtime=runtime)
    warn_if_anonymous(settings)
    server = _Server(uvicorn_config(settings, app))
    task = asyncio.create_task(server.serve(), name="uvicorn")
    stopper = asyncio.create_task(stop.wait())
    await asyncio.wait({task, stopper}, return_when=asyncio.FIRST_COMPLETED)
    stopper.cancel()
    if not task.done():
        log.info("gateway stopping: closing connections with %d", CloseCode.SERVICE_RESTART)
        runtime.close_connections(CloseCode.SERVICE_RESTART)
        server.should_exit = True
    await task
    if server.started is False and not stop.is_set():
        raise GatewayStartError("gateway failed to start (see log)")


def run(settings: Settings) -> int:
    """Entry of ``relaybus gateway``: exit 2 for a token configuration it cannot serve,
    1 for a port it cannot bind or settings Redis refuses (one line each). An unreachable
    Redis is retried (``/readyz`` answers 503 meanwhile)."""
    try:
        create_app(settings)  # validates the token configuration before binding anything
    except AuthConfigError as exc:
        print(f"relaybus gateway: {exc}", file=sys.stderr)
        return 2
    tune_gc()

    async def main() -> None:
        check_port(settings.gateway_host, settings.gateway_port, "RELAYBUS_GATEWAY_PORT")
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await serve_unless_refused(
            settings,
            stop,
            lambda: serve(settings, stop),
            log,
            "/readyz answers 503 until it answers",
        )

    try:
        asyncio.run(main())
    except (GatewayStartError, StartupError, RedisRefused) as exc:
        print(f"relaybus gateway: {exc}", file=sys.stderr)
        return 1
    return 0
