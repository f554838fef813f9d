"""The lean floor: the fewest steps from an appended line to every client's socket.

inotify wake-up on the event loop (:mod:`rig.inotify`) → read what was appended → one
pipelined ``XADD`` per wake-up → ``XREAD BLOCK`` on a second connection → ONE WebSocket
text frame built per entry and written to every socket's transport (the frames of one
``XREAD`` reply in one write per socket). The WebSocket server
is a bare ``asyncio.Protocol``: the upgrade handshake, then it ignores what clients send
(no pings, no close handshake, no per-socket queue or task). Nothing here is a guarantee
relaybus gives (no order across restarts, no gaps, no backpressure, no scopes): it is
what those guarantees are measured against.

``copies=2`` (``lean-full`` in ``compare.py``) sends each line twice in one frame
(``[line,line]``): the bytes of relaybus's full frame, which carries the record and its
projection (~4.0 KB for the benches' ~2.0 KB line, against ~2.0 KB for its ``blocks_only``
frame). It separates what a delivery costs per byte from what relaybus adds per delivery.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import struct
import time
from pathlib import Path
from typing import cast

import redis.asyncio as aioredis

from rig.inotify import Inotify

GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
#: XREAD of a bytes client (RESP2): [[stream, [[id, fields], ...]], ...]
XReadReply = list[tuple[bytes, list[tuple[bytes, dict[bytes, bytes]]]]]


def frame(payload: bytes) -> bytes:
    """One unmasked, final WebSocket text frame."""
    n = len(payload)
    if n < 126:
        return bytes((0x81, n)) + payload
    if n < 1 << 16:
        return struct.pack("!BBH", 0x81, 126, n) + payload
    return struct.pack("!BBQ", 0x81, 127, n) + payload


class Socket(asyncio.Protocol):
    """A client: its handshake answered, then only written to."""

    def __init__(self, conns: set[asyncio.Transport]) -> None:
        self.conns = conns
        self.transport: asyncio.Transport | None = None
        self.head: bytes | None = b""  # None once upgraded

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        if self.head is None or self.transport is None:
            return  # upgraded: what a client sends is ignored
        head = self.head + data
        if b"\r\n\r\n" not in head:
            self.head = head
            if len(head) > 16 * 1024:
                self.transport.close()
            return
        key = b""
        for line in head.split(b"\r\n"):
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"sec-websocket-key":
                key = value.strip()
        accept = base64.b64encode(hashlib.sha1(key + GUID).digest())
        self.transport.write(
            b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
            b"Connection: Upgrade\r\nSec-WebSocket-Accept: " + accept + b"\r\n\r\n"
        )
        self.head = None
        self.conns.add(self.transport)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.transport is not None:
            self.conns.discard(self.transport)


def payload(line: bytes, copies: int) -> bytes:
    """What one frame carries for ``line``: the line, or ``copies`` of it as a JSON array."""
    return line if copies == 1 else b"[" + b",".join([line] * copies) + b"]"


async def serve(directory: Path, redis_url: str, port: int, copies: int = 1) -> None:
    """Run the lean floor on ``port`` for ``.jsonl`` files appended in ``directory``, each
    line sent ``copies`` times in its frame."""
    loop = asyncio.get_running_loop()
    writer = aioredis.Redis.from_url(redis_url)
    reader = aioredis.Redis.from_url(redis_url)
    stream = f"lean:{time.time_ns()}"
    conns: set[asyncio.Transport] = set()
    offsets: dict[str, int] = {}
    woken = asyncio.Event()
    ino = Inotify(str(directory))
    loop.add_reader(ino.fd, woken.set)

    async def tail() -> None:
        while True:
            await woken.wait()
            woken.clear()
            lines: list[bytes] = []
            for name in ino.names():
                if not name.endswith(".jsonl"):
                    continue
                with open(directory / name, "rb") as f:  # noqa: ASYNC230 - a page-cache read
                    f.seek(offsets.get(name, 0))
                    data = f.read()
                end = data.rfind(b"\n") + 1
                offsets[name] = offsets.get(name, 0) + end
                lines += data[:end].splitlines()
            if lines:
                pipe = writer.pipeline(transaction=False)
                for line in lines:
                    pipe.xadd(stream, {"f": line})
                await pipe.execute()

    async def fan() -> None:
        last: str | bytes = "$"
        while True:
            reply = cast(
                XReadReply | None, await reader.xread({stream: last}, block=1000, count=100)
            )
            for _key, entries in reply or []:
                last = entries[-1][0]
                # One frame per entry, built once; the frames of one XREAD reply joined, so
                # each socket gets one write per reply (as relaybus's run fan-out does).
                out = b"".join(frame(payload(fields[b"f"], copies)) for _eid, fields in entries)
                for t in conns:
                    t.write(out)

    server = await loop.create_server(lambda: Socket(conns), "127.0.0.1", port)
    async with server:
        print("READY", flush=True)
        await asyncio.gather(tail(), fan())
