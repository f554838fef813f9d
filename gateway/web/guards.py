"""Transport guards against slow and flooding clients, below the ASGI app.

* :func:`guarded_http` — uvicorn's h11 protocol with a header deadline (a request's
  headers must be complete ``header_timeout_s`` after its first byte, or after the
  connection opened) and a connection cap (refused at once with 503 above it, so a
  slowloris never exhausts file descriptors and ``/healthz`` keeps answering).
  An upgrade goes to :mod:`relaybus.gateway.web.wsserver` (its own guards, in
  :mod:`~relaybus.gateway.web.wsconn`: ping floods, unread answers, parse slices), with the
  bytes the client sent after the request head.
* :class:`AcceptErrorThrottle` — asyncio logs ``socket.accept() out of system
  resource`` once per retry; this keeps one line a minute with a count.
"""

from __future__ import annotations

import asyncio
import logging
import resource
import time
from typing import cast

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

log = logging.getLogger(__name__)

#: Largest request head (line and headers) accepted; h11's default is 16 KiB.
MAX_HEADER_BYTES = 16 * 1024
_SPARE_FDS = 64
_AUTO_CAP = 4096

_REFUSED = (
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain\r\n"
    b"content-length: 5\r\nconnection: close\r\n\r\nbusy\n"
)


def max_connections(configured: int) -> int:
    """``configured``, or (0) the open-file limit minus spare descriptors, at most 4096."""
    if configured > 0:
        return configured
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return _AUTO_CAP
    return max(16, min(_AUTO_CAP, soft - _SPARE_FDS))


def guarded_http(*, header_timeout_s: float, max_conns: int) -> type[H11Protocol]:
    """An :class:`H11Protocol` class with a header deadline and a connection cap."""

    class GuardedH11Protocol(H11Protocol):
        _header_timer: asyncio.TimerHandle | None = None
        _refused = False

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            if len(self.connections) >= max_conns:
                self.transport = transport
                self._refused = True
                transport.write(_REFUSED)
                transport.close()
                log.debug("connection refused: %d connections open", len(self.connections))
                return
            super().connection_made(transport)
            self._arm()

        def _arm(self) -> None:
            if self._header_timer is None:
                self._header_timer = self.loop.call_later(header_timeout_s, self._headers_late)

        def _disarm(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _headers_late(self) -> None:
            self._header_timer = None
            if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
                log.debug(
                    "connection from %s: request headers not complete in %.0fs",
                    self.client,
                    header_timeout_s,
                )
                self.transport.abort()

        def data_received(self, data: bytes) -> None:
            if self.conn.their_state is h11.IDLE:
                self._arm()  # the next request's head starts: it has a deadline too
            super().data_received(data)
            if self.conn.their_state is not h11.IDLE:
                self._disarm()

        def handle_websocket_upgrade(self, event: h11.Request) -> None:
            self._disarm()
            trailing, _closed = self.conn.trailing_data
            super().handle_websocket_upgrade(event)
            if trailing:  # frames sent right behind the request head
                cast(asyncio.Protocol, self.transport.get_protocol()).data_received(trailing)

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            if self._refused:  # refused in connection_made: nothing was set up
                return
            super().connection_lost(exc)

    return GuardedH11Protocol


class AcceptErrorThrottle(logging.Filter):
    """Let ``socket.accept() out of system resource`` through once per ``every_s``."""

    MESSAGE = "socket.accept() out of system resource"

    def __init__(self, every_s: float = 60.0) -> None:
        super().__init__()
        self.every_s = every_s
        self._last = -float("inf")
        self._dropped = 0

    def filter(self, record: logging.LogRecord) -> bool:
        if not str(record.msg).startswith(self.MESSAGE):
            return True
        now = time.monotonic()
        if now - self._last < self.every_s:
            self._dropped += 1
            return False
        self._last = now
        if self._dropped:
            record.msg = f"{record.msg} ({self._dropped} more since the last such line)"
            self._dropped = 0
        record.exc_info = None  # the traceback is always the same EMFILE
        return True


def install_accept_throttle(every_s: float = 60.0) -> AcceptErrorThrottle:
    """Attach the throttle to asyncio's logger (idempotent)."""
    logger = logging.getLogger("asyncio")
    for f in logger.filters:
        if isinstance(f, AcceptErrorThrottle):
            return f
    throttle = AcceptErrorThrottle(every_s)
    logger.addFilter(throttle)
    return throttle
