"""Worker processes for ``bench/gateway_bench.py`` (clients and the bare-pipeline floor).

Clients are :class:`RawClient`s (a minimal frame parser) so that they stay cheaper than
the servers they measure; both relaybus and the floor are measured with the same client.

``clients``: open N WebSocket clients (relaybus protocol or the floor's plain broadcast),
print ``READY``, receive until each got ``--count`` timed frames or ``--idle-s`` pass
without traffic, then print one JSON line: latencies (ms) and counts.

``floor``: the bare pipeline of the same hops as relaybus — watchfiles on a directory
(1 ms step), read the appended line, XADD it, XREAD BLOCK it back, ``websockets``
``broadcast`` to every connected client. No projection, no protocol, no checks.

``idle``: open N clients that send hello and then stay idle (memory benchmark).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import os
import struct
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import cast

import orjson
import redis.asyncio as aioredis
from websockets.asyncio.server import ServerConnection, broadcast, serve

# XREAD of a bytes client (RESP2): [[stream, [[id, fields], ...]], ...]
XReadReply = list[tuple[bytes, list[tuple[bytes, dict[bytes, bytes]]]]]


def stamp_of(raw: bytes) -> int | None:
    """The send time (ns) embedded in a frame's text as ``lat <ns>`` (a byte search: the
    clients must stay cheaper than the server they measure)."""
    at = raw.find(b'"lat ')
    if at < 0 or (b'"session_event"' not in raw[:40] and b'"message"' not in raw):
        return None
    digits = raw[at + 5 : at + 24]  # time_ns(): 19 digits (a padded line goes on after them)
    return int(digits) if digits.isdigit() else None


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


async def open_client(url: str, token: str, sid: str | None) -> RawClient:
    c = await RawClient.open(url, token)
    if sid is not None:
        c.send_text('{"type":"hello","capabilities":["session_subscriptions"]}')
        c.send_text(orjson.dumps({"type": "watch_session", "sessionId": sid}).decode())
        while not any(b'"watch_ack"' in f for f in await c.frames()):
            pass
    return c


async def run_clients(args: argparse.Namespace) -> None:
    sids = args.sids.split(",") if args.sids else [None]
    clients: list[RawClient] = []
    for i in range(args.n):
        clients.append(await open_client(args.url, args.token, sids[i % len(sids)]))
    lat: list[float] = []
    counts = [0] * len(clients)
    closed = 0
    last = [time.monotonic()]
    print("READY", flush=True)

    async def drain(i: int, c: RawClient) -> None:
        nonlocal closed
        try:
            while counts[i] < args.count:
                frames = await c.frames()
                now = time.time_ns()
                for raw in frames:
                    t = stamp_of(raw)
                    if t is not None:
                        lat.append((now - t) / 1e6)
                        counts[i] += 1
                last[0] = time.monotonic()
        except (ConnectionError, OSError):
            closed += 1

    tasks = [asyncio.create_task(drain(i, c)) for i, c in enumerate(clients)]
    started = time.monotonic()
    while not all(t.done() for t in tasks):
        await asyncio.sleep(0.2)
        idle = time.monotonic() - last[0]
        if idle > args.idle_s and time.monotonic() - started > args.idle_s:
            break
    for t in tasks:
        t.cancel()
    for c in clients:
        c.close()
    out = {
        "latencies_ms": lat,
        "received": sum(counts),
        "clients": len(clients),
        "closed": closed,
        "min_per_client": min(counts) if counts else 0,
    }
    sys.stdout.write(orjson.dumps(out).decode() + "\n")
    sys.stdout.flush()


async def run_idle(args: argparse.Namespace) -> None:
    clients = [await RawClient.open(args.url, args.token) for _ in range(args.n)]
    for c in clients:
        c.send_text('{"type":"hello","capabilities":["session_subscriptions"]}')
    print("READY", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    for c in clients:
        c.close()


async def run_floor(args: argparse.Namespace) -> None:
    from watchfiles import awatch

    directory = Path(args.dir)
    client = aioredis.Redis.from_url(args.redis)
    reader = aioredis.Redis.from_url(args.redis)
    stream = f"floor:{time.time_ns()}"
    conns: set[ServerConnection] = set()
    offsets: dict[Path, int] = {}

    async def handler(ws: ServerConnection) -> None:
        conns.add(ws)
        try:
            await ws.wait_closed()
        finally:
            conns.discard(ws)

    async def tail() -> None:
        # The collector's watchfiles tuning: 1 ms step, 50 ms debounce ceiling.
        async for changes in awatch(directory, step=1, debounce=50, recursive=True):
            for _change, name in changes:
                path = Path(name)
                if path.suffix != ".jsonl":
                    continue
                data = read_from(path, offsets.get(path, 0))
                end = data.rfind(b"\n") + 1
                offsets[path] = offsets.get(path, 0) + end
                for line in data[:end].splitlines():
                    await client.xadd(stream, {"f": line})

    async def fan() -> None:
        last: str | bytes = "$"
        while True:
            reply = cast(
                XReadReply | None, await reader.xread({stream: last}, block=1000, count=100)
            )
            for _key, entries in reply or []:
                for eid, fields in entries:
                    last = eid
                    broadcast(conns, fields[b"f"].decode())

    async with serve(handler, "127.0.0.1", args.port, compression=None):
        print("READY", flush=True)
        await asyncio.gather(tail(), fan())


def read_from(path: Path, offset: int) -> bytes:
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["clients", "idle", "floor"])
    p.add_argument("--url", default="")
    p.add_argument("--token", default="bench")
    p.add_argument("--n", type=int, default=1)
    p.add_argument("--sids", default="")
    p.add_argument("--count", type=int, default=1000)
    p.add_argument("--idle-s", type=float, default=5.0)
    p.add_argument("--dir", default="")
    p.add_argument("--redis", default="")
    p.add_argument("--port", type=int, default=0)
    args = p.parse_args()
    runner = {"clients": run_clients, "idle": run_idle, "floor": run_floor}[args.mode]
    asyncio.run(runner(args))


if __name__ == "__main__":
    main()
