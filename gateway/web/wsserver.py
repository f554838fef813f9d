"""``/ws`` on relaybus's own WebSocket protocol: one small object per connection.

uvicorn's h11 protocol hands an upgrade request to :func:`websocket_protocol`'s class (its
``ws=``): it builds the protocol, calls ``connection_made`` and feeds it the request head.
The protocol checks the handshake (:mod:`relaybus.gateway.web.wsframes`), the ``Host`` and
the path, then runs the ``/ws`` handler in the connection's one task with itself as
everything the handler needs: the request's headers and query (released on accept), the
peer, ``accept``/``receive``/``close``, and the :class:`FrameSink` live delivery writes to
(``write_now`` checks one flag and writes the bytes every connection shares).

Guards below the handler: frames are parsed :data:`PARSE_SLICE` bytes at a time; a client
sending more than :data:`PINGS_PER_S_MAX` pings a second, or leaving more than
``write_buffer_max`` bytes of answers unread, is dropped; messages above
``config.ws_max_size`` fail with 1009; reading pauses while a message waits for the handler.
Keepalive pings (``ws_ping_interval``) close a silent peer with 1011, as uvicorn's did.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, cast
from urllib.parse import parse_qsl, unquote

from uvicorn.config import Config
from uvicorn.middleware.proxy_headers import _TrustedHosts
from uvicorn.protocols.utils import get_remote_addr
from uvicorn.server import ServerState

from relaybus.gateway.delivery.events import ws_text_frame
from relaybus.gateway.delivery.runs import Burst
from relaybus.gateway.delivery.wsio import ClientGone, WriteTimeout
from relaybus.gateway.frames import Outgoing
from relaybus.gateway.web import wsframes as wf
from relaybus.gateway.web.security import HostPolicy

log = logging.getLogger(__name__)

#: Bytes the gateway lets wait in one WebSocket transport before it drops the client
#: (its own bursts stay far below: 128 KiB chunks above a 64 KiB high-water mark).
WRITE_BUFFER_MAX = 4 * 1024 * 1024
#: Bytes handed to the frame parser at a time: a dropped flooder's read (up to 256 KiB
#: of frames) is not parsed past the slice that got it dropped.
PARSE_SLICE = 8 * 1024
#: Pings a client may send per second (keepalives are one per 20 s; browsers send none).
PINGS_PER_S_MAX = 10
#: Largest request head accepted from uvicorn (it has checked h11's 16 KiB already).
_HEAD_MAX = 64 * 1024
_CONNECTING, _OPEN, _CLOSING, _CLOSED = 0, 1, 2, 3
_NOT_HERE = "this gateway is not served under that host name\n"


@dataclass(frozen=True, slots=True)
class WsRoute:
    """What ``/ws`` is served with: the handler, the ``Host`` names, the refusal counter."""

    handler: Callable[[WsServer], Awaitable[None]]
    hosts: HostPolicy
    refused: Callable[[], None]
    write_timeout_s: float = 30.0
    close_timeout_s: float = 10.0


@dataclass(frozen=True, slots=True)
class _Limits:
    max_size: int
    ping_interval: float | None
    ping_timeout: float | None
    trusted: _TrustedHosts | None
    write_buffer_max: int


class WsServer(asyncio.Protocol):
    """One ``/ws`` connection (see the module doc); made by :func:`websocket_protocol`."""

    route: ClassVar[WsRoute]
    limits: ClassVar[_Limits]
    #: Log frames are written as the shared bytes they arrive as (no extension).
    raw_ok: bool = True

    __slots__ = (
        "_buf",
        "_conns",
        "_drain",
        "_frag",
        "_frag_text",
        "_inbox",
        "_key",
        "_paused",
        "_ping_payload",
        "_ping_window",
        "_pings",
        "_rpaused",
        "_state",
        "_stopped",
        "_task",
        "_tasks",
        "_timer",
        "_waiter",
        "client",
        "headers",
        "ok",
        "query_params",
        "transport",
    )

    def __init__(
        self, config: Config, server_state: ServerState, app_state: dict[str, Any]
    ) -> None:
        self._conns = server_state.connections
        self._tasks = server_state.tasks
        self.transport: asyncio.Transport | None = None
        self.client: tuple[str, int] | None = None
        self.headers: dict[str, str] = {}
        self.query_params: dict[str, str] = {}
        #: True while the connection is open and the transport takes data: the one check
        #: of a live write.
        self.ok = False
        self._state = _CONNECTING
        self._paused = False  # the transport asked us to stop writing
        self._rpaused = False  # we asked the transport to stop reading
        self._stopped = False  # the handler's receive should return (the sender ended)
        self._buf: bytearray | None = None
        self._frag: bytearray | None = None
        self._frag_text = False
        self._inbox: list[str | bytes] | None = None
        self._key: str | None = None
        self._pings = 0
        self._ping_window = 0.0
        self._ping_payload: bytes | None = None
        self._timer: asyncio.TimerHandle | None = None
        #: Futures made only while someone waits: the handler for a message, a writer for
        #: the transport to drain.
        self._waiter: asyncio.Future[None] | None = None
        self._drain: asyncio.Future[None] | None = None
        self._task: asyncio.Task[None] | None = None

    # --- asyncio.Protocol ---------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        self.client = get_remote_addr(self.transport)
        self._conns.add(self)  # type: ignore[arg-type]

    def connection_lost(self, exc: Exception | None) -> None:
        self._state = _CLOSED
        self.ok = False
        self._conns.discard(self)
        self._cancel_timer()
        self._buf = self._frag = None
        _wake(self._waiter)
        _wake(self._drain)
        if exc is None and self.transport is not None:
            self.transport.close()

    def pause_writing(self) -> None:
        self._paused = True
        self.ok = False

    def resume_writing(self) -> None:
        self._paused = False
        self.ok = self._state == _OPEN
        _wake(self._drain)

    def data_received(self, data: bytes) -> None:
        state = self._state
        if state in (_OPEN, _CLOSING):
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
        elif state == _CONNECTING:
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
        if self._state == _OPEN:
            transport.write(wf.close_frame(1012))
        elif self._state == _CONNECTING:
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
            if self._state == _CONNECTING:
                self._refuse(500, "internal error\n")
        finally:
            self._task = None
            transport = self.transport
            if self._state != _CLOSING and transport is not None:
                transport.close()  # a close handshake in progress ends by itself (or its timer)

    # --- what the /ws handler uses --------------------------------------------------------

    def accept(self) -> None:
        """Send the ``101``; the request's headers and query are released."""
        transport = self.transport
        if self._state != _CONNECTING or transport is None or transport.is_closing():
            raise ClientGone("the client left before the upgrade")
        assert self._key is not None
        transport.write(wf.switching(self._key))
        self._key = None
        self.headers = {}
        self.query_params = {}
        self._state = _OPEN
        self.ok = not self._paused
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
            if self._state != _OPEN or self._stopped:
                return None
            waiter = self._waiter = asyncio.get_running_loop().create_future()
            try:
                await waiter
            finally:
                self._waiter = None

    def stop(self) -> None:
        """Make :meth:`receive` return ``None`` (the connection's sender has ended)."""
        self._stopped = True
        _wake(self._waiter)

    async def close(self, code: int, reason: str = "") -> None:
        """Before :meth:`accept`: refuse the upgrade (HTTP 403). After: send a close frame
        (once the transport takes data) and wait ``close_timeout_s`` for the client's."""
        if self._state == _CONNECTING:
            self._refuse(403, "")
            return
        while self._state == _OPEN and self._paused:
            await self._writable()
        transport = self.transport
        if self._state != _OPEN or transport is None:
            return
        self._cancel_timer()
        transport.write(wf.close_frame(code, reason))
        self._state = _CLOSING
        self.ok = False
        self._timer = asyncio.get_running_loop().call_later(
            self.route.close_timeout_s, transport.close
        )

    # --- FrameSink ------------------------------------------------------------------------

    def write_now(self, items: Sequence[Outgoing]) -> bool:
        if not self.ok:
            return False
        self.transport.write(_wire(items))  # type: ignore[union-attr]
        return True

    async def send_many(self, items: Sequence[Outgoing]) -> None:
        if self._state == _OPEN and self._paused:
            # The transport's flow control with a deadline: a client that takes nothing
            # for that long is dropped, never buffered for.
            try:
                async with asyncio.timeout(self.route.write_timeout_s):
                    while self._state == _OPEN and self._paused:
                        await self._writable()
            except TimeoutError:
                raise WriteTimeout from None
        if self._state != _OPEN or self.transport is None:
            raise ClientGone("the connection is closing")
        self.transport.write(_wire(items))

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()

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
        if self._state != _OPEN:
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
        elif self._state == _OPEN:
            transport.write(wf.control(wf.PONG, payload))

    def _client_closed(self, payload: bytes) -> None:
        code = wf.parse_close(payload)
        transport = self.transport
        assert transport is not None
        if self._state == _OPEN:  # echo the client's code
            transport.write(wf.control(wf.CLOSE, payload[:2] if code is not None else b""))
        self._closed()
        transport.close()

    def _fail(self, code: int, reason: str) -> None:
        transport = self.transport
        assert transport is not None
        log.debug("connection from %s failed: %d %s", self.client, code, reason)
        if self._state == _OPEN:
            transport.write(wf.close_frame(code, reason))
        self._closed()
        transport.close()

    def _closed(self) -> None:
        """No more frames either way; the handler's receive returns what is left, then None."""
        self._state = _CLOSED
        self.ok = False
        self._cancel_timer()
        self._frag = None
        _wake(self._waiter)
        _wake(self._drain)

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
        if self._state != _OPEN or transport is None or transport.is_closing():
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
        if self._state == _OPEN:
            self._fail(1011, "keepalive ping timeout")

    def _pong(self, payload: bytes) -> None:
        if self._ping_payload is None or payload != self._ping_payload:
            return
        self._ping_payload = None
        if self.limits.ping_timeout and self._state == _OPEN:
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


def websocket_protocol(
    route: WsRoute, config: Config, *, write_buffer_max: int = WRITE_BUFFER_MAX
) -> type[WsServer]:
    """The ``ws=`` class of ``config``: :class:`WsServer` bound to ``route`` and the
    config's limits (``ws_max_size``, keepalive, trusted proxies)."""
    trusted = _TrustedHosts(config.forwarded_allow_ips) if config.proxy_headers else None
    limits = _Limits(
        max_size=config.ws_max_size,
        ping_interval=config.ws_ping_interval,
        ping_timeout=config.ws_ping_timeout,
        trusted=trusted,
        write_buffer_max=write_buffer_max,
    )

    class BoundWsServer(WsServer):
        __slots__ = ()

    BoundWsServer.route = route
    BoundWsServer.limits = limits
    return BoundWsServer
