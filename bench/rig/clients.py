"""The benches' cheap WebSocket client and the timed-line stamp it looks for."""

from __future__ import annotations

import asyncio
import base64
import os
import struct
from collections.abc import Callable, Sequence
from pathlib import Path

import orjson

#: A line's stamp is ``lat <19-digit time_ns> <6-digit index> <filler>`` in its text.
STAMP = b'"lat '


def parse(raw: bytes) -> tuple[int, int] | None:
    """(write time ns, line index) of a timed line inside a frame, or None."""
    at = raw.find(STAMP)
    if at < 0:
        return None
    ns, idx = raw[at + 5 : at + 24], raw[at + 25 : at + 31]
    if not (ns.isdigit() and idx.isdigit()):
        return None
    return int(ns), int(idx)


class RawClient(asyncio.Protocol):
    """A minimal WebSocket client on a raw transport: frames parsed as the bytes arrive.

    The websockets client costs tens of microseconds per message, which on a 2-core box
    would measure the clients rather than the server; this one only finds frame
    boundaries, answers pings and hands text payloads over. It parses in the protocol's
    ``data_received`` (no ``StreamReader``: its buffer copied every read twice and woke a
    reader per read), so a client costs one wake-up of its reader per socket read.
    """

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buf = b""
        self.head: bytes | None = None  # the handshake answer, once complete
        self._ready: list[bytes] = []
        self._error: ConnectionError | None = None
        self._waiter: asyncio.Future[None] | None = None
        #: When set (:meth:`listen`), frames go to it as they are parsed, not to frames().
        self._on_frames: Callable[[list[bytes]], None] | None = None
        self._on_closed: Callable[[], None] | None = None

    @classmethod
    async def open(cls, url: str, token: str, path: str = "/ws") -> RawClient:
        hostport = url.split("//", 1)[1].split("/", 1)[0]
        host, port = hostport.rsplit(":", 1)
        loop = asyncio.get_running_loop()
        _, self = await loop.create_connection(cls, host, int(port))
        key = base64.b64encode(os.urandom(16)).decode()
        self.write(
            (
                f"GET {path} HTTP/1.1\r\nHost: {hostport}\r\nUpgrade: websocket\r\n"
                f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                f"Sec-WebSocket-Version: 13\r\nAuthorization: Bearer {token}\r\n\r\n"
            ).encode()
        )
        while self.head is None:
            await self._wait()
        if b" 101 " not in self.head.split(b"\r\n", 1)[0]:
            raise RuntimeError(f"handshake failed: {self.head[:80]!r}")
        return self

    # --- asyncio.Protocol ---------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        buf = self.buf + data
        if self.head is None:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                self.buf = buf
                return
            self.head, buf = buf[: end + 4], buf[end + 4 :]
        out = self._ready
        pos = 0
        while len(buf) - pos >= 2:
            b0, b1 = buf[pos], buf[pos + 1] & 0x7F
            hl = 2
            if b1 == 126:
                if len(buf) - pos < 4:
                    break
                b1, hl = struct.unpack_from("!H", buf, pos + 2)[0], 4
            elif b1 == 127:
                if len(buf) - pos < 10:
                    break
                b1, hl = struct.unpack_from("!Q", buf, pos + 2)[0], 10
            if len(buf) - pos < hl + b1:
                break
            payload = buf[pos + hl : pos + hl + b1]
            pos += hl + b1
            opcode = b0 & 0x0F
            if opcode == 0x1:
                out.append(payload)
            elif opcode == 0x9:
                self.send(0xA, payload)
            elif opcode == 0x8 and self._error is None:
                self._error = ConnectionError(f"server closed: {payload[:2].hex()} {payload[2:]!r}")
        self.buf = buf[pos:]
        if self._on_frames is not None and out:
            self._ready = []
            self._on_frames(out)
        self._wake()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._error is None:
            self._error = ConnectionError("closed")
        if self._on_closed is not None:
            self._on_closed()
        self._wake()

    def listen(
        self, on_frames: Callable[[list[bytes]], None], on_closed: Callable[[], None]
    ) -> None:
        """Hand every later batch of frames to ``on_frames`` from the protocol callback
        (no task wakes up per read); ``on_closed`` once the connection is gone."""
        self._on_frames, self._on_closed = on_frames, on_closed
        if self._ready:
            ready, self._ready = self._ready, []
            on_frames(ready)
        if self._error is not None:
            on_closed()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def _wait(self) -> None:
        if self._error is not None:
            raise self._error
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None

    # --- the client's side --------------------------------------------------------------

    def write(self, data: bytes) -> None:
        if self.transport is not None:
            self.transport.write(data)

    def send(self, opcode: int, payload: bytes) -> None:
        mask = os.urandom(4)
        n = len(payload)
        if n < 126:
            header = bytes((0x80 | opcode, 0x80 | n))
        elif n < 1 << 16:
            header = struct.pack("!BBH", 0x80 | opcode, 0x80 | 126, n)
        else:
            header = struct.pack("!BBQ", 0x80 | opcode, 0x80 | 127, n)
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        self.write(header + mask + masked)

    def send_text(self, text: str) -> None:
        self.send(0x1, text.encode())

    async def frames(self) -> list[bytes]:
        """The text payloads of every complete frame received since the last call, once
        there is at least one; ``ConnectionError`` once closed and all were taken."""
        while not self._ready:
            await self._wait()
        out, self._ready = self._ready, []
        return out

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


#: What relaybus's web client asks for: ``blocks_only`` leaves ``event.data`` (the raw
#: record, about half of a frame) out of every frame it is sent.
PHONE_CAPABILITIES = ("session_subscriptions", "blocks_only")


async def open_client(
    url: str, token: str, sid: str | None, caps: Sequence[str] = ("session_subscriptions",)
) -> RawClient:
    c = await RawClient.open(url, token)
    if sid is not None:
        c.send_text(orjson.dumps({"type": "hello", "capabilities": list(caps)}).decode())
        c.send_text(orjson.dumps({"type": "watch_session", "sessionId": sid}).decode())
        while not any(b'"watch_ack"' in f for f in await c.frames()):
            pass
    return c


def read_from(path: Path, offset: int) -> bytes:
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read()
