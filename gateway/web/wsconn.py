"""An open WebSocket connection on its transport (RFC 6455, the server's side), one slotted
object: frames parsed into messages for one reader, ping/pong, both close handshakes,
keepalive, flow control, and writes of pre-encoded frames (a :class:`FrameSink`: a live
write checks one flag, ``ok``). :class:`relaybus.gateway.web.wsserver.WsServer` adds the
opening handshake and the ``/ws`` handler.

Guards: frames are parsed :data:`PARSE_SLICE` bytes at a time; a client sending more than
:data:`PINGS_PER_S_MAX` pings a second, or leaving more than ``write_buffer_max`` bytes of
answers unread, is dropped; a message above ``max_size`` fails with 1009 as soon as its
frame header arrives; reading pauses while a message waits for the reader. Keepalive pings
close a silent peer with 1011.

Over 300 lines on purpose: the point is one object per connection (no per-connection
parser, queue or event objects), so the frame level's state and the methods that share it
stay in one class.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, cast

from uvicorn.middleware.proxy_headers import _TrustedHosts
from uvicorn.protocols.utils import get_remote_addr

from relaybus.gateway.delivery.events import ws_text_frame
from relaybus.gateway.delivery.runs import Burst
from relaybus.gateway.delivery.wsio import ClientGone, Write, WriteTimeout
from relaybus.gateway.frames import Outgoing
from relaybus.gateway.web import wsframes as wf

log = logging.getLogger(__name__)

#: Bytes the gateway lets wait in one WebSocket transport before it drops the client
#: (its own bursts stay far below: 128 KiB chunks above a 64 KiB high-water mark).
WRITE_BUFFER_MAX = 4 * 1024 * 1024
#: Bytes handed to the frame parser at a time: a dropped flooder's read (up to 256 KiB
#: of frames) is not parsed past the slice that got it dropped.
PARSE_SLICE = 8 * 1024
#: Pings a client may send per second (keepalives are one per 20 s; browsers send none).
PINGS_PER_S_MAX = 10
CONNECTING, OPEN, CLOSING, CLOSED = 0, 1, 2, 3


@dataclass(frozen=True, slots=True)
class WsLimits:
    """Every connection's limits (one object per server)."""

    max_size: int
    ping_interval: float | None
    ping_timeout: float | None
    #: Proxies whose ``X-Forwarded-For`` names the client (``None``: trust none).
    trusted: _TrustedHosts | None
    write_buffer_max: int = WRITE_BUFFER_MAX
    #: A write that the transport takes nothing of for this long is :class:`WriteTimeout`.
    write_timeout_s: float = 30.0
    #: How long our close waits for the client's.
    close_timeout_s: float = 10.0


class WsConnection(asyncio.Protocol):
    """One connection (see the module doc)."""

    limits: ClassVar[WsLimits]
    #: Log frames are written as the shared bytes they arrive as (no extension).
    raw_ok: bool = True

    __slots__ = (
        "_buf",
        "_changed",
        "_conns",
        "_drain",
        "_frag",
        "_frag_text",
        "_inbox",
        "_paused",
        "_ping_payload",
        "_ping_window",
        "_pings",
        "_rpaused",
        "_state",
        "_stopped",
        "_timer",
        "_waiter",
        "client",
        "ok",
        "transport",
    )

    def __init__(self, connections: set[Any]) -> None:
        #: The server's open connections (uvicorn's ``server_state.connections``).
        self._conns = connections
        self.transport: asyncio.Transport | None = None
        self.client: tuple[str, int] | None = None
        #: True while the connection is open and the transport takes data: the one check
        #: of a live write.
        self.ok = False
        self._state = CONNECTING
        self._paused = False  # the transport asked us to stop writing
        self._rpaused = False  # we asked the transport to stop reading
        self._stopped = False  # the reader's receive should return (the connection closes)
        self._buf: bytearray | None = None
        self._frag: bytearray | None = None
        self._frag_text = False
        self._inbox: list[str | bytes] | None = None
        self._pings = 0
        self._ping_window = 0.0
        self._ping_payload: bytes | None = None
        self._timer: asyncio.TimerHandle | None = None
        #: Futures made only while someone waits: the reader for a message, a writer for
        #: the transport to drain.
        self._waiter: asyncio.Future[None] | None = None
        self._drain: asyncio.Future[None] | None = None
        #: Told whenever ``ok`` may change (the hub's cache of steady transports).
        self._changed: Callable[[], object] | None = None

    # --- asyncio.Protocol ---------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        self.client = get_remote_addr(self.transport)
        self._conns.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self._state = CLOSED
        self._set_ok(False)
        self._conns.discard(self)
        self._cancel_timer()
        self._buf = self._frag = None
        _wake(self._waiter)
        self._wake_writers()
        if exc is None and self.transport is not None:
            self.transport.close()

    def pause_writing(self) -> None:
        self._paused = True
        self._set_ok(False)

    def resume_writing(self) -> None:
        self._paused = False
        self._set_ok(self._state == OPEN)
        self._wake_writers()

    def _set_ok(self, ok: bool) -> None:
        self.ok = ok
        changed = self._changed
        if changed is not None:
            changed()

    def data_received(self, data: bytes) -> None:
        state = self._state
        if state in (OPEN, CLOSING):
            transport = self.transport
            assert transport is not None
            if len(data) <= PARSE_SLICE:
                self._parse(data)
            else:
                for at in range(0, len(data), PARSE_SLICE):
                    self._parse(data[at : at + PARSE_SLICE])
                    if transport.is_closing():
                        return
            self._check_backlog(transport)
        elif state == CONNECTING:
            self._before_open(data)

    def _before_open(self, data: bytes) -> None:
        """Bytes before the connection is open (the opening handshake's: a subclass's)."""
        raise NotImplementedError

    # --- the reader ----------------------------------------------------------------------

    def _opened(self) -> None:
        """The opening handshake is done: frames flow (any the client sent early are parsed
        now)."""
        self._state = OPEN
        self._set_ok(not self._paused)
        self._schedule_ping()
        pending, self._buf = self._buf, None
        if pending:
            self.data_received(bytes(pending))
        self._resume_reading()

    async def receive(self) -> str | bytes | None:
        """The next message; ``None`` once the client is gone or :meth:`stop` was called."""
        while True:
            inbox = self._inbox
            if inbox:
                message = inbox.pop(0)
                if not inbox:
                    self._inbox = None
                    self._resume_reading()
                return message
            if self._state != OPEN or self._stopped:
                return None
            waiter = self._waiter = asyncio.get_running_loop().create_future()
            try:
                await waiter
            finally:
                self._waiter = None

    def stop(self) -> None:
        """Make :meth:`receive` return ``None`` (the connection is closing)."""
        self._stopped = True
        _wake(self._waiter)

    async def close(self, code: int, reason: str = "") -> None:
        """Send a close frame (once the transport takes data) and wait ``close_timeout_s``
        for the client's; the transport goes then."""
        while self._state == OPEN and self._paused:
            await self._writable()
        transport = self.transport
        if self._state != OPEN or transport is None:
            return
        self._cancel_timer()
        transport.write(wf.close_frame(code, reason))
        self._state = CLOSING
        self._set_ok(False)
        self._timer = asyncio.get_running_loop().call_later(
            self.limits.close_timeout_s, transport.close
        )

    # --- FrameSink ------------------------------------------------------------------------

    def write_now(self, items: Sequence[Outgoing]) -> bool:
        if not self.ok:
            return False
        self.transport.write(_wire(items))  # type: ignore[union-attr]
        return True

    def steady_write(self, changed: Callable[[], object]) -> Write | None:
        self._changed = changed
        return self.transport.write if self.ok and self.transport is not None else None

    async def send_many(self, items: Sequence[Outgoing]) -> None:
        if self._state == OPEN and self._paused:
            # The transport's flow control with a deadline: a client that takes nothing
            # for that long is dropped, never buffered for.
            try:
                async with asyncio.timeout(self.limits.write_timeout_s):
                    while self._state == OPEN and self._paused:
                        await self._writable()
            except TimeoutError:
                raise WriteTimeout from None
        if self._state != OPEN or self.transport is None:
            raise ClientGone("the connection is closing")
        self.transport.write(_wire(items))

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()

    def _wake_writers(self) -> None:
        drain, self._drain = self._drain, None  # a connection that drained holds no future
        _wake(drain)

    async def _writable(self) -> None:
        drain = self._drain
        if drain is None or drain.done():
            drain = self._drain = asyncio.get_running_loop().create_future()
        await asyncio.shield(drain)  # one waiter's cancellation is not another's

    # --- frames ---------------------------------------------------------------------------

    def _parse(self, chunk: bytes) -> None:
        buf = self._buf
        if buf is None:
            buf = self._buf = bytearray(chunk)
        else:
            buf += chunk
        max_size = self.limits.max_size
        transport = self.transport
        assert transport is not None
        while buf:
            frag = self._frag
            try:
                got = wf.next_frame(buf, max_size - len(frag) if frag is not None else max_size)
                if got is None:
                    break
                frame, end = got
                del buf[:end]
                self._frame(frame)
            except wf.WsError as exc:
                self._fail(exc.code, exc.reason)
                return
            if transport.is_closing():
                return
        if not buf:
            self._buf = None

    def _frame(self, frame: wf.Frame) -> None:
        op = frame.opcode
        if op == wf.TEXT or op == wf.BINARY:
            if self._frag is not None:
                raise wf.WsError(1002, "a new message inside a fragmented one")
            if frame.fin:
                self._message(op == wf.TEXT, frame.payload)
            else:
                self._frag = bytearray(frame.payload)
                self._frag_text = op == wf.TEXT
        elif op == wf.CONT:
            frag = self._frag
            if frag is None:
                raise wf.WsError(1002, "a continuation frame without a message")
            frag += frame.payload
            if frame.fin:
                self._frag = None
                self._message(self._frag_text, bytes(frag))
        elif op == wf.PING:
            self._ping(frame.payload)
        elif op == wf.PONG:
            self._pong(frame.payload)
        else:
            self._client_closed(frame.payload)

    def _message(self, text: bool, data: bytes) -> None:
        if self._state != OPEN:
            return  # past our close frame: dropped while the client's close is awaited
        message: str | bytes = data
        if text:
            try:
                message = data.decode()
            except UnicodeDecodeError:
                raise wf.WsError(1007, "text message is not UTF-8") from None
        if log.isEnabledFor(logging.DEBUG):
            log.debug("connection from %s: < %r", self.client, message[:512])
        inbox = self._inbox
        if inbox is None:
            self._inbox = [message]
        else:
            inbox.append(message)
        self._pause_reading()  # until the handler takes it
        _wake(self._waiter)

    def _ping(self, payload: bytes) -> None:
        transport = self.transport
        assert transport is not None
        now = asyncio.get_running_loop().time()
        if now - self._ping_window >= 1.0:
            self._ping_window, self._pings = now, 0
        self._pings += 1
        if self._pings > PINGS_PER_S_MAX:
            log.info("connection from %s: ping flood, dropped", self.client)
            transport.abort()
        elif self._state == OPEN:
            transport.write(wf.control(wf.PONG, payload))

    def _client_closed(self, payload: bytes) -> None:
        code = wf.parse_close(payload)
        transport = self.transport
        assert transport is not None
        if self._state == OPEN:  # echo the client's code
            transport.write(wf.control(wf.CLOSE, payload[:2] if code is not None else b""))
        self._closed()
        transport.close()

    def _fail(self, code: int, reason: str) -> None:
        transport = self.transport
        assert transport is not None
        log.debug("connection from %s failed: %d %s", self.client, code, reason)
        if self._state == OPEN:
            transport.write(wf.close_frame(code, reason))
        self._closed()
        transport.close()

    def _closed(self) -> None:
        """No more frames either way; the handler's receive returns what is left, then None."""
        self._state = CLOSED
        self._set_ok(False)
        self._cancel_timer()
        self._frag = None
        _wake(self._waiter)
        self._wake_writers()

    def _check_backlog(self, transport: asyncio.Transport) -> None:
        if transport.is_closing():
            return
        size = transport.get_write_buffer_size()
        if size > self.limits.write_buffer_max:
            log.info(
                "connection from %s: %d bytes unread (ping flood?), dropped", self.client, size
            )
            transport.abort()

    def _pause_reading(self) -> None:
        if not self._rpaused and self.transport is not None:
            self._rpaused = True
            self.transport.pause_reading()

    def _resume_reading(self) -> None:
        if self._rpaused and self._inbox is None and self.transport is not None:
            self._rpaused = False
            self.transport.resume_reading()

    # --- keepalive ------------------------------------------------------------------------

    def _schedule_ping(self) -> None:
        interval = self.limits.ping_interval
        if interval:
            self._timer = asyncio.get_running_loop().call_later(interval, self._send_ping)

    def _send_ping(self) -> None:
        self._timer = None
        transport = self.transport
        if self._state != OPEN or transport is None or transport.is_closing():
            return
        self._ping_payload = os.urandom(4)
        transport.write(wf.control(wf.PING, self._ping_payload))
        timeout = self.limits.ping_timeout
        if timeout:
            self._timer = asyncio.get_running_loop().call_later(timeout, self._ping_late)
        else:
            self._schedule_ping()

    def _ping_late(self) -> None:
        self._timer = None
        self._ping_payload = None
        if self._state == OPEN:
            self._fail(1011, "keepalive ping timeout")

    def _pong(self, payload: bytes) -> None:
        if self._ping_payload is None or payload != self._ping_payload:
            return
        self._ping_payload = None
        if self.limits.ping_timeout and self._state == OPEN:
            self._cancel_timer()
            self._schedule_ping()

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


def _wire(items: Sequence[Outgoing]) -> bytes:
    """The bytes of ``items``: log frames as their shared pre-encoded bytes."""
    if isinstance(items, Burst):
        return items.wire
    if len(items) == 1 and items[0].wire is not None:
        return items[0].wire
    return b"".join(
        item.wire if item.wire is not None else ws_text_frame(item.text.encode()) for item in items
    )


def _wake(waiter: asyncio.Future[None] | None) -> None:
    if waiter is not None and not waiter.done():
        waiter.set_result(None)
