"""``/ws`` on relaybus's own WebSocket protocol: one small object per connection.

uvicorn's h11 protocol hands an upgrade request to :func:`websocket_protocol`'s class (its
``ws=``): it builds the protocol, calls ``connection_made`` and feeds it the request head.
:class:`WsServer` checks the handshake (:mod:`relaybus.gateway.web.wsframes`), the ``Host``
and the path, then runs the ``/ws`` handler in the connection's one task with itself as
everything the handler needs: the request's headers and query (released on accept), the
peer, ``accept``/``receive``/``close``, and the :class:`FrameSink` live delivery writes to.
The open connection's frames, guards and keepalive are :mod:`relaybus.gateway.web.wsconn`'s.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, ClassVar
from urllib.parse import parse_qsl, unquote

from uvicorn.config import Config
from uvicorn.middleware.proxy_headers import _TrustedHosts
from uvicorn.server import ServerState

from relaybus.gateway.delivery.wsio import ClientGone
from relaybus.gateway.web import wsframes as wf
from relaybus.gateway.web.security import HostPolicy
from relaybus.gateway.web.wsconn import (
    CLOSING,
    CONNECTING,
    OPEN,
    WRITE_BUFFER_MAX,
    WsConnection,
    WsLimits,
)

log = logging.getLogger(__name__)

#: Largest request head accepted from uvicorn (it has checked h11's 16 KiB already).
_HEAD_MAX = 64 * 1024
_NOT_HERE = "this gateway is not served under that host name\n"


@dataclass(frozen=True, slots=True)
class WsRoute:
    """What ``/ws`` is served with: the handler, the ``Host`` names, the refusal counter."""

    handler: Callable[[WsServer], Awaitable[None]]
    hosts: HostPolicy
    refused: Callable[[], None]
    write_timeout_s: float = 30.0
    close_timeout_s: float = 10.0


class WsServer(WsConnection):
    """One ``/ws`` connection (see the module doc); made by :func:`websocket_protocol`."""

    route: ClassVar[WsRoute]

    __slots__ = ("_key", "_task", "_tasks", "headers", "query_params")

    def __init__(
        self, config: Config, server_state: ServerState, app_state: dict[str, Any]
    ) -> None:
        super().__init__(server_state.connections)
        self._tasks = server_state.tasks
        self.headers: dict[str, str] = {}
        self.query_params: dict[str, str] = {}
        self._key: str | None = None
        self._task: asyncio.Task[None] | None = None

    def _before_open(self, data: bytes) -> None:
        buf = self._buf
        if buf is None:
            buf = self._buf = bytearray()
        buf += data
        if self._key is None:
            self._handshake(buf)
        else:  # frames before our 101: they wait for accept()
            self._pause_reading()

    def shutdown(self) -> None:
        """uvicorn's server exit (the gateway has already closed its sockets with 1012)."""
        transport = self.transport
        if transport is None:
            return
        if self._state == OPEN:
            transport.write(wf.close_frame(1012))
        elif self._state == CONNECTING:
            transport.write(wf.http_error(503, "shutting down\n"))
        self._closed()
        transport.close()

    # --- the handshake ------------------------------------------------------------------

    def _handshake(self, buf: bytearray) -> None:
        transport = self.transport
        assert transport is not None
        end = buf.find(b"\r\n\r\n")
        if end < 0:
            if len(buf) > _HEAD_MAX:
                transport.abort()
            return
        lines = bytes(buf[:end]).decode("latin-1").split("\r\n")
        del buf[: end + 4]
        method, _, rest = lines[0].partition(" ")
        target = rest.rpartition(" ")[0]
        headers: dict[str, str] = {}
        repeated: set[str] = set()
        for line in lines[1:]:
            name, _, value = line.partition(":")
            name = name.strip().lower()
            if name in headers:
                repeated.add(name)
            else:
                headers[name] = value.strip()
        refusal = wf.handshake_refusal(method, headers)
        if refusal is None and repeated & {"sec-websocket-key", "sec-websocket-version"}:
            refusal = 400, "one Sec-WebSocket-Key and one Sec-WebSocket-Version expected\n"
        if refusal is not None:
            self._refuse(*refusal)
            return
        route = self.route
        if "host" in repeated or not route.hosts.allows(headers.get("host")):
            route.refused()
            log.debug("upgrade refused: Host %r is not a name of this gateway", headers.get("host"))
            self._refuse(403, _NOT_HERE)
            return
        log.debug("upgrade from %s: %s %s", self.client, method, target[:512])
        path, _, query = target.partition("?")
        if unquote(path) != "/ws":
            self._refuse(404, "WebSocket connections are served on /ws only\n")
            return
        self._key = wf.accept_key(headers["sec-websocket-key"])
        self.headers = headers
        self.query_params = dict(parse_qsl(query, keep_blank_values=True))
        self._forwarded(headers)
        task = asyncio.get_running_loop().create_task(self._serve())
        self._task = task
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _forwarded(self, headers: dict[str, str]) -> None:
        """The client behind a trusted proxy (``X-Forwarded-For``), as uvicorn's middleware."""
        trusted = self.limits.trusted
        forwarded = headers.get("x-forwarded-for")
        if trusted is None or forwarded is None or self.client is None:
            return
        if self.client[0] in trusted:
            host, port = trusted.get_trusted_client_address(forwarded)
            if host:
                self.client = (host, port)

    def _refuse(self, status: int, body: str) -> None:
        transport = self.transport
        assert transport is not None
        transport.write(wf.http_error(status, body))
        self._closed()
        transport.close()

    async def _serve(self) -> None:
        try:
            await self.route.handler(self)
        except Exception:
            log.exception("/ws handler failed")
            if self._state == CONNECTING:
                self._refuse(500, "internal error\n")
        finally:
            self._task = None
            transport = self.transport
            if self._state != CLOSING and transport is not None:
                transport.close()  # a close handshake in progress ends by itself (or its timer)

    # --- what the /ws handler uses (and WsConnection's receive, stop, sink) -------------

    def accept(self) -> None:
        """Send the ``101``; the request's headers and query are released."""
        transport = self.transport
        if self._state != CONNECTING or transport is None or transport.is_closing():
            raise ClientGone("the client left before the upgrade")
        assert self._key is not None
        transport.write(wf.switching(self._key))
        self._key = None
        self.headers = {}
        self.query_params = {}
        self._opened()

    async def close(self, code: int, reason: str = "") -> None:
        """Before :meth:`accept`: refuse the upgrade (HTTP 403); after: the close handshake."""
        if self._state == CONNECTING:
            self._refuse(403, "")
            return
        await super().close(code, reason)


def websocket_protocol(
    route: WsRoute, config: Config, *, write_buffer_max: int = WRITE_BUFFER_MAX
) -> type[WsServer]:
    """The ``ws=`` class of ``config``: :class:`WsServer` bound to ``route`` and the
    config's limits (``ws_max_size``, keepalive, trusted proxies)."""
    trusted = _TrustedHosts(config.forwarded_allow_ips) if config.proxy_headers else None
    limits = WsLimits(
        max_size=config.ws_max_size,
        ping_interval=config.ws_ping_interval,
        ping_timeout=config.ws_ping_timeout,
        trusted=trusted,
        write_buffer_max=write_buffer_max,
        write_timeout_s=route.write_timeout_s,
        close_timeout_s=route.close_timeout_s,
    )

    class BoundWsServer(WsServer):
        __slots__ = ()

    BoundWsServer.route = route
    BoundWsServer.limits = limits
    return BoundWsServer
