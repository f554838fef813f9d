"""Worker processes for ``bench/gateway_bench.py`` (clients and the bare-pipeline floor).

Clients are :class:`RawClient`s (a minimal frame parser) so that they stay cheaper than
the servers they measure; both relaybus and the floor are measured with the same client.

``clients``: open N WebSocket clients (relaybus protocol or the floor's plain broadcast),
print ``READY``, receive until each got ``--count`` timed frames or ``--idle-s`` pass
without traffic, then print one JSON line: latencies (ms) and counts.

``floor``: the bare pipeline of the same hops as relaybus — watchfiles on a directory
(1 ms step), read the appended line, XADD it, XREAD BLOCK it back, ``websockets``
``broadcast`` to every connected client. No projection, no protocol, no checks.

``lean``: the lean floor (:mod:`rig.lean_floor`): inotify, one pipelined XADD per
wake-up, XREAD BLOCK, one pre-built frame written to every socket's transport.

``idle``: open N clients that send hello and then stay idle (memory benchmark).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path
from typing import cast

import orjson
import redis.asyncio as aioredis
from rig.clients import RawClient, open_client, read_from
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


async def run_lean(args: argparse.Namespace) -> None:
    from rig.lean_floor import serve as lean

    await lean(Path(args.dir), args.redis, args.port, args.copies)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["clients", "idle", "floor", "lean"])
    p.add_argument("--url", default="")
    p.add_argument("--token", default="bench")
    p.add_argument("--n", type=int, default=1)
    p.add_argument("--sids", default="")
    p.add_argument("--count", type=int, default=1000)
    p.add_argument("--idle-s", type=float, default=5.0)
    p.add_argument("--dir", default="")
    p.add_argument("--redis", default="")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--copies", type=int, default=1, help="lean: the line this many times a frame")
    args = p.parse_args()
    runner = {"clients": run_clients, "idle": run_idle, "floor": run_floor, "lean": run_lean}[
        args.mode
    ]
    asyncio.run(runner(args))


if __name__ == "__main__":
    main()
