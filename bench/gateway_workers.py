"""Worker processes for ``bench/gateway_bench.py`` (clients and the bare-pipeline floor).

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
import contextlib
import sys
import time
from pathlib import Path

import orjson
import redis.asyncio as aioredis
from websockets.asyncio.client import ClientConnection, connect
from websockets.asyncio.server import ServerConnection, broadcast, serve


def stamp_of(raw: str | bytes, floor: bool) -> int | None:
    """The send time (ns) embedded in a line's text as ``lat <ns>``."""
    obj = orjson.loads(raw)
    if floor:
        text = obj.get("message", {}).get("content", "")
    else:
        if obj.get("type") != "session_event":
            return None
        blocks = obj["event"].get("blocks") or []
        text = blocks[0].get("text", "") if blocks else ""
    if not isinstance(text, str) or not text.startswith("lat "):
        return None
    return int(text[4:])


async def open_client(url: str, token: str, sid: str | None) -> ClientConnection:
    ws = await connect(url, additional_headers={"Authorization": f"Bearer {token}"},
                       compression=None, max_size=None, open_timeout=60, ping_interval=None)
    if sid is not None:
        await ws.send('{"type":"hello","capabilities":["session_subscriptions"]}')
        await ws.send(orjson.dumps({"type": "watch_session", "sessionId": sid}).decode())
        while True:
            if orjson.loads(await ws.recv()).get("type") == "watch_ack":
                break
    return ws


async def run_clients(args: argparse.Namespace) -> None:
    sids = args.sids.split(",") if args.sids else [None]
    clients: list[ClientConnection] = []
    for i in range(args.n):
        clients.append(await open_client(args.url, args.token, sids[i % len(sids)]))
        if i % 100 == 99:
            await asyncio.sleep(0)
    lat: list[float] = []
    counts = [0] * len(clients)
    closed = 0
    last = [time.monotonic()]
    print("READY", flush=True)

    async def drain(i: int, ws: ClientConnection) -> None:
        nonlocal closed
        try:
            while counts[i] < args.count:
                raw = await ws.recv()
                now = time.time_ns()
                t = stamp_of(raw, args.floor)
                if t is not None:
                    lat.append((now - t) / 1e6)
                    counts[i] += 1
                    last[0] = time.monotonic()
        except Exception:
            closed += 1

    tasks = [asyncio.create_task(drain(i, ws)) for i, ws in enumerate(clients)]
    started = time.monotonic()
    while not all(t.done() for t in tasks):
        await asyncio.sleep(0.2)
        idle = time.monotonic() - last[0]
        if idle > args.idle_s and time.monotonic() - started > args.idle_s:
            break
    for t in tasks:
        t.cancel()
    for ws in clients:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(ws.close(), 2)
    out = {"latencies_ms": lat, "received": sum(counts), "clients": len(clients),
           "closed": closed, "min_per_client": min(counts) if counts else 0}
    sys.stdout.write(orjson.dumps(out).decode() + "\n")
    sys.stdout.flush()


async def run_idle(args: argparse.Namespace) -> None:
    clients = [await open_client(args.url, args.token, None) for _ in range(args.n)]
    for ws in clients:
        await ws.send('{"type":"hello","capabilities":["session_subscriptions"]}')
    print("READY", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    for ws in clients:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(ws.close(), 2)


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
        last = "$"
        while True:
            reply = await reader.xread({stream: last}, block=1000, count=100)
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
    p.add_argument("--floor", action="store_true")
    p.add_argument("--dir", default="")
    p.add_argument("--redis", default="")
    p.add_argument("--port", type=int, default=0)
    args = p.parse_args()
    runner = {"clients": run_clients, "idle": run_idle, "floor": run_floor}[args.mode]
    asyncio.run(runner(args))


if __name__ == "__main__":
    main()
