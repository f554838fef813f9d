"""Writing frames: several WebSocket messages in one transport write when possible.

A replay is hundreds of frames. Through ASGI every message is its own ``send`` and its
own socket write; on uvicorn's sans-I/O websockets protocol we can serialise a whole
burst with the protocol's own ``send_text`` and hand the bytes to the transport once
(still one WebSocket message per event). The fast path is used only when ``send`` is
that protocol's bound method (the ``/ws`` endpoint is mounted ahead of any middleware
that would wrap it); otherwise frames go through ASGI one by one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, Protocol

from starlette.websockets import WebSocket, WebSocketDisconnect
from websockets.exceptions import InvalidState
from websockets.protocol import State

from relaybus.gateway.delivery.runs import Burst
from relaybus.gateway.frames import Outgoing

try:  # uvicorn's sans-I/O implementation (the one relaybus.gateway.main configures)
    from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
except ImportError:  # pragma: no cover - other servers use the ASGI path
    WebSocketsSansIOProtocol = None  # type: ignore[assignment,misc]


class WriteTimeout(Exception):
    """The socket took no data for the whole write deadline (the client does not read)."""


class FrameSink(Protocol):
    #: Pre-encoded frames are written as they are; the ``text`` of such items is unused.
    raw_ok: bool

    async def send_many(self, items: Sequence[Outgoing]) -> None:
        """Write a burst; :class:`WriteTimeout` when the socket takes nothing in time."""
        ...

    def abort(self) -> None:
        """Drop the connection now, without flushing what is buffered (a stuck client)."""
        ...

    def write_now(self, items: Sequence[Outgoing]) -> bool:
        """Write without waiting if the transport takes data now; ``False``: use send_many."""
        ...


class AsgiSink:
    """One ASGI ``websocket.send`` per frame (any ASGI server)."""

    raw_ok = False

    def __init__(self, ws: WebSocket, write_timeout_s: float = 30.0) -> None:
        self.ws = ws
        self.write_timeout_s = write_timeout_s

    async def send_many(self, items: Sequence[Outgoing]) -> None:
        for item in items:
            try:
                async with asyncio.timeout(self.write_timeout_s):
                    await self.ws.send_text(item.text)
            except TimeoutError:
                raise WriteTimeout from None

    def abort(self) -> None:
        """Nothing to abort through plain ASGI: the server's own timeouts apply."""

    def write_now(self, items: Sequence[Outgoing]) -> bool:
        return False


class BurstSink:
    """All frames of a burst written with one ``transport.write``.

    Log events arrive pre-encoded (:meth:`relaybus.gateway.delivery.events.Event.wire`: the same bytes for
    every connection); other frames are encoded by the protocol's ``send_text``. Raw
    bytes are used only while the connection is open and has no extension (no
    permessage-deflate), where a text frame's bytes do not depend on the connection.
    """

    def __init__(self, proto: Any, write_timeout_s: float = 30.0) -> None:
        self.proto = proto
        self.raw_ok = not getattr(proto.conn, "extensions", [])
        self.write_timeout_s = write_timeout_s

    async def send_many(self, items: Sequence[Outgoing]) -> None:
        p = self.proto
        if not p.writable.is_set():
            # The transport's flow control, as uvicorn's send does, with a deadline: a
            # client that takes nothing for that long is dropped, never buffered for.
            try:
                async with asyncio.timeout(self.write_timeout_s):
                    await p.writable.wait()
            except TimeoutError:
                raise WriteTimeout from None
        if p.disconnected or p.close_sent:
            raise WebSocketDisconnect(1006)
        try:
            self._write(items)
        except InvalidState:
            raise WebSocketDisconnect(1006) from None

    def abort(self) -> None:
        transport = self.proto.transport
        if transport is not None:
            transport.abort()

    def write_now(self, items: Sequence[Outgoing]) -> bool:
        p = self.proto
        if not p.writable.is_set() or p.disconnected or p.close_sent:
            return False
        try:
            self._write(items)
        except InvalidState:  # closing: the sender's path reports the disconnect
            return False
        return True

    def _write(self, items: Sequence[Outgoing]) -> None:
        conn = self.proto.conn
        if conn.state is not State.OPEN:
            raise InvalidState("connection is not open")
        raw_ok = self.raw_ok
        if raw_ok:
            # Live log frames (one event, or one run's burst): bytes shared by every
            # connection, written as they are.
            if isinstance(items, Burst):
                self.proto.transport.write(items.wire)
                return
            if len(items) == 1 and items[0].wire is not None:
                self.proto.transport.write(items[0].wire)
                return
        chunks: list[bytes] = []
        for item in items:
            if item.wire is not None and raw_ok:
                chunks.append(item.wire)
            else:
                conn.send_text(item.text.encode())
                chunks.extend(conn.data_to_send())
        self.proto.transport.write(b"".join(chunks))


def sink_for(ws: WebSocket, send: Any, write_timeout_s: float = 30.0) -> FrameSink:
    """The burst writer when ``send`` belongs to uvicorn's sans-I/O protocol, else ASGI."""
    proto = getattr(send, "__self__", None)
    if (
        WebSocketsSansIOProtocol is not None
        and isinstance(proto, WebSocketsSansIOProtocol)
        and all(hasattr(proto, a) for a in ("conn", "transport", "writable", "close_sent"))
    ):
        return BurstSink(proto, write_timeout_s)
    return AsgiSink(ws, write_timeout_s)
