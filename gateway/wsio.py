"""Writing frames: several WebSocket messages in one transport write when possible.

A replay is hundreds of frames. Through ASGI every message is its own ``send`` and its
own socket write; on uvicorn's sans-I/O websockets protocol we can serialise a whole
burst with the protocol's own ``send_text`` and hand the bytes to the transport once
(still one WebSocket message per event). The fast path is used only when ``send`` is
that protocol's bound method (the ``/ws`` endpoint is mounted ahead of any middleware
that would wrap it); otherwise frames go through ASGI one by one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from starlette.websockets import WebSocket, WebSocketDisconnect

try:  # uvicorn's sans-I/O implementation (the one gateway.main configures)
    from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
except ImportError:  # pragma: no cover - other servers use the ASGI path
    WebSocketsSansIOProtocol = None  # type: ignore[assignment,misc]


class FrameSink(Protocol):
    async def send_many(self, texts: Sequence[str]) -> None: ...


class AsgiSink:
    """One ASGI ``websocket.send`` per frame (any ASGI server)."""

    def __init__(self, ws: WebSocket) -> None:
        self.ws = ws

    async def send_many(self, texts: Sequence[str]) -> None:
        for text in texts:
            await self.ws.send_text(text)


class BurstSink:
    """All frames of a burst encoded by the protocol and written with one ``write``."""

    def __init__(self, proto: Any) -> None:
        self.proto = proto

    async def send_many(self, texts: Sequence[str]) -> None:
        p = self.proto
        await p.writable.wait()  # the transport's flow control, as uvicorn's send does
        if p.disconnected or p.close_sent:
            raise WebSocketDisconnect(1006)
        conn = p.conn
        for text in texts:
            conn.send_text(text.encode())
        p.transport.write(b"".join(conn.data_to_send()))


def sink_for(ws: WebSocket, send: Any) -> FrameSink:
    """The burst writer when ``send`` belongs to uvicorn's sans-I/O protocol, else ASGI."""
    proto = getattr(send, "__self__", None)
    if (
        WebSocketsSansIOProtocol is not None
        and isinstance(proto, WebSocketsSansIOProtocol)
        and all(hasattr(proto, a) for a in ("conn", "transport", "writable", "close_sent"))
    ):
        return BurstSink(proto)
    return AsgiSink(ws)
