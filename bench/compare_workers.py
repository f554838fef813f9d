"""Worker processes for ``bench/compare.py``: the python-socketio stack and the clients.

``sio-server``: python-socketio's ``AsyncServer`` with an ``AsyncRedisManager`` on uvicorn
(websocket transport only); every client joins room ``watch`` on connect.

``sio-tail``: the same tailer as the floor (watchfiles on a directory, 1 ms step) emitting
each appended line to room ``watch`` through a write-only ``AsyncRedisManager`` — the
documented way for another process to emit into a Socket.IO cluster, as the collector
feeds the gateways through Redis.

``clients``: N clients of one system (``--proto relaybus|floor|sio``), all on the same
minimal client (:class:`rig.clients.RawClient`), so that the clients cost the same for
every system and stay cheaper than the servers they measure. Prints ``READY``, receives
until each client got ``--count`` timed lines or ``--max-s`` passed, prints one JSON line.

``storm``: N clients that, on ``drop`` (stdin), all close; on ``resume`` all reconnect at
once (relaybus: ``hello{lastSeqId}`` and ``watch_session{sinceSeqId}``, the others just
reconnect) and receive until each has every line written while they were away.

``idle``: N connected clients that stay idle until stdin closes (memory per connection).

``sio-pyclient``: N ``socketio.AsyncClient``s (websocket transport) in the room, for a
check of what the reference client costs (not the default: on 2 cores it measures itself).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import re
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import orjson
from rig.clients import PHONE_CAPABILITIES, RawClient, open_client, parse, read_from

LATE_MS = 10_000.0
DIGITS = re.compile(rb"\d+")
SIO_PATH = "/socket.io/?EIO=4&transport=websocket"


def seq_of(raw: bytes) -> int | None:
    """The ``seqId`` of a relaybus frame: the collector's append script puts it last, so
    it is searched from the end (a search from the start read all of every ~4.5 KB frame,
    a fifth of the storm client's CPU, and could stop at a ``"seqId":`` in the content)."""
    at = raw.rfind(b'"seqId":')
    m = DIGITS.match(raw, at + 8) if at >= 0 else None
    return int(m.group()) if m else None


class Client:
    """One connection of any of the three systems, with its own receive state."""

    def __init__(
        self,
        proto: str,
        url: str,
        token: str,
        sid: str,
        track: bool = False,
        caps: Sequence[str] = ("session_subscriptions",),
    ) -> None:
        self.proto, self.url, self.token, self.sid = proto, url, token, sid
        self.caps = list(caps)  # relaybus: the hello's capabilities
        #: Keep ``last_seq`` (relaybus, for a resume): only the storm needs it.
        self.track = track and proto == "relaybus"
        self.conn: RawClient | None = None
        self.last_seq = 0  # relaybus: highest log-derived seqId (all are this session's here)
        self.seen: set[int] = set()

    async def connect(self, resume: bool = False) -> None:
        if self.proto == "relaybus":
            if not resume:
                self.conn = await open_client(self.url, self.token, self.sid, self.caps)
                return
            c = await RawClient.open(self.url, self.token)
            c.send_text(
                orjson.dumps(
                    {
                        "type": "hello",
                        "capabilities": self.caps,
                        "lastSeqId": self.last_seq,
                    }
                ).decode()
            )
            c.send_text(
                orjson.dumps(
                    {"type": "watch_session", "sessionId": self.sid, "sinceSeqId": self.last_seq}
                ).decode()
            )
            self.conn = c
        elif self.proto == "sio":
            c = await RawClient.open(self.url, "", SIO_PATH)
            c.send_text("40")  # connect to the default namespace (after engine.io's open)
            while not any(f.startswith(b"40") for f in await c.frames()):
                pass
            self.conn = c
        else:
            self.conn = await RawClient.open(self.url, self.token)

    async def frames(self) -> list[bytes]:
        assert self.conn is not None
        out = await self.conn.frames()
        if self.proto == "sio" and b"2" in out:
            self.conn.send_text("3")  # engine.io ping -> pong
        if self.track:
            for raw in out:
                if raw.startswith(b'{"type":"session_event"') or b'"session_event"' in raw[:40]:
                    seq = seq_of(raw)
                    if seq is not None and seq > self.last_seq:
                        self.last_seq = seq
        return out

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None


def caps(args: argparse.Namespace) -> Sequence[str]:
    """relaybus clients: what the web client asks for (``--blocks-only``) or full frames."""
    return PHONE_CAPABILITIES if args.blocks_only else ("session_subscriptions",)


def report(out: dict[str, Any]) -> None:
    sys.stdout.write(orjson.dumps(out).decode() + "\n")
    sys.stdout.flush()


async def run_clients(args: argparse.Namespace) -> None:
    """Latency of ``--count`` lines to N clients, bounded by ``--max-s`` after READY."""
    clients = [
        Client(args.proto, args.url, args.token, args.sid, caps=caps(args)) for _ in range(args.n)
    ]
    for c in clients:
        await c.connect()
    lat: list[float] = []
    counts = [0] * len(clients)
    per_line: dict[str, float] = {}  # --per-line (one client): latency by line index
    closed = 0
    print("READY", flush=True)

    pending = len(clients)
    finished = [False] * len(clients)
    all_done = asyncio.Event()

    def finish(i: int) -> None:
        nonlocal pending
        finished[i] = True
        pending -= 1
        if not pending:
            all_done.set()

    def listener(i: int, c: Client) -> tuple[Callable[[list[bytes]], None], Callable[[], None]]:
        """Frames are handled in the connection's protocol callback: no task per client."""

        def on_frames(frames: list[bytes]) -> None:
            if c.proto == "sio" and b"2" in frames and c.conn is not None:
                c.conn.send_text("3")  # engine.io ping -> pong
            if finished[i]:
                return
            now = time.time_ns()
            for raw in frames:
                got = parse(raw)
                if got is not None:
                    lat.append((now - got[0]) / 1e6)
                    counts[i] += 1
                    if args.per_line:
                        per_line[str(got[1])] = lat[-1]
            if counts[i] >= args.count:
                finish(i)

        def on_closed() -> None:
            nonlocal closed
            if not finished[i]:
                closed += 1
                finish(i)

        return on_frames, on_closed

    for i, c in enumerate(clients):
        assert c.conn is not None
        c.conn.listen(*listener(i, c))
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(all_done.wait(), args.max_s)
    for c in clients:
        c.close()
    report(
        {
            "latencies_ms": lat,
            "received": sum(counts),
            "clients": len(clients),
            "closed": closed,
            "min_per_client": min(counts) if counts else 0,
            "per_line_ms": per_line,
            "cpu_s": round(time.process_time(), 2),
        }
    )


async def run_storm(args: argparse.Namespace) -> None:
    """The reconnect storm: connect, drop all on ``drop``, reconnect all on ``resume``."""
    clients = [
        Client(args.proto, args.url, args.token, args.sid, track=True, caps=caps(args))
        for _ in range(args.n)
    ]
    for c in clients:
        await c.connect()
    print("READY", flush=True)
    loop = asyncio.get_running_loop()
    first, last = args.first, args.first + args.count  # the indexes written while away

    async def listen(c: Client) -> None:
        try:
            while True:
                await c.frames()
        except (ConnectionError, OSError):
            pass

    tasks = [asyncio.create_task(listen(c)) for c in clients]
    await loop.run_in_executor(None, sys.stdin.readline)  # "drop"
    for t in tasks:
        t.cancel()
    for c in clients:
        c.close()
    print("DROPPED", flush=True)
    await loop.run_in_executor(None, sys.stdin.readline)  # "resume"
    t0 = time.monotonic()
    lat: list[float] = []
    done_at = [float("nan")] * len(clients)
    connected_at = [float("nan")] * len(clients)
    retries: list[str] = []

    async def resume(i: int, c: Client) -> None:
        # As a real client does: a closed connection is reopened and resumed (from what it
        # got so far), after a short random back-off.
        while True:
            try:
                await c.connect(resume=True)
                if connected_at[i] != connected_at[i]:  # NaN: the first reconnect
                    connected_at[i] = time.monotonic() - t0
                while len(c.seen) < args.count:
                    frames = await c.frames()
                    now = time.time_ns()
                    for raw in frames:
                        got = parse(raw)
                        if got is not None and first <= got[1] < last and got[1] not in c.seen:
                            c.seen.add(got[1])
                            lat.append((now - got[0]) / 1e6)
                done_at[i] = time.monotonic() - t0
                return
            except (ConnectionError, OSError, RuntimeError) as e:
                retries.append(str(e)[:80])
                c.close()
                await asyncio.sleep(random.uniform(0.1, 0.5))

    tasks = [asyncio.create_task(resume(i, c)) for i, c in enumerate(clients)]
    await asyncio.wait(tasks, timeout=args.max_s)
    for t in tasks:
        t.cancel()
    for c in clients:
        c.close()
    caught = [d for d in done_at if d == d]
    back = [d for d in connected_at if d == d]
    report(
        {
            "clients": len(clients),
            "lines_while_away": args.count,
            "reconnects_retried": len(retries),
            "retry_reasons": sorted(set(retries))[:3],
            "all_reconnected_s": round(max(back), 2) if len(back) == len(clients) else None,
            "clients_caught_up": len(caught),
            "all_caught_up_s": round(max(caught), 2) if len(caught) == len(clients) else None,
            "deliveries": len(lat),
            "expected": len(clients) * args.count,
            "lost": len(clients) * args.count - len(lat),
            "late_over_10s": sum(1 for x in lat if x > LATE_MS),
            "bound_s": args.max_s,
        }
    )


async def run_idle(args: argparse.Namespace) -> None:
    clients = [
        Client(args.proto, args.url, args.token, args.sid, caps=caps(args)) for _ in range(args.n)
    ]
    for c in clients:
        await c.connect()
    print("READY", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    for c in clients:
        c.close()


async def run_sio_pyclient(args: argparse.Namespace) -> None:
    """Latency with python-socketio's own ``AsyncClient`` (websocket transport)."""
    import socketio

    lat: list[float] = []
    counts = [0] * args.n
    clients = []
    complete = asyncio.Event()
    for i in range(args.n):
        cl = socketio.AsyncClient(reconnection=False)

        def on_line(data: str, i: int = i) -> None:
            got = parse(data.encode())
            if got is not None:
                lat.append((time.time_ns() - got[0]) / 1e6)
                counts[i] += 1
                if len(lat) >= args.n * args.count:
                    complete.set()

        cl.on("line", on_line)
        await cl.connect(args.url, transports=["websocket"])
        clients.append(cl)
    print("READY", flush=True)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(complete.wait(), args.max_s)
    for cl in clients:
        await cl.disconnect()
    report(
        {
            "latencies_ms": lat,
            "received": sum(counts),
            "clients": args.n,
            "closed": 0,
            "min_per_client": min(counts),
        }
    )


async def run_sio_server(args: argparse.Namespace) -> None:
    import socketio
    import uvicorn

    mgr = socketio.AsyncRedisManager(args.redis, channel=args.channel)
    sio = socketio.AsyncServer(async_mode="asgi", client_manager=mgr, transports=["websocket"])

    @sio.event  # type: ignore[untyped-decorator]  # python-socketio ships no types
    async def connect(sid: str, environ: dict[str, Any]) -> None:
        await sio.enter_room(sid, "watch")

    config = uvicorn.Config(
        socketio.ASGIApp(sio),
        host="127.0.0.1",
        port=args.port,
        log_level="warning",
        ws="websockets-sansio",
        lifespan="off",
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    while not server.started:  # noqa: ASYNC110 - uvicorn offers no event for it
        await asyncio.sleep(0.01)
    print("READY", flush=True)
    await task


async def run_sio_tail(args: argparse.Namespace) -> None:
    import socketio
    from watchfiles import awatch

    mgr = socketio.AsyncRedisManager(args.redis, channel=args.channel, write_only=True)
    directory = Path(args.dir)
    offsets: dict[Path, int] = {}
    print("READY", flush=True)
    # The floor's (and the collector's) watchfiles tuning: 1 ms step, 50 ms debounce ceiling.
    async for changes in awatch(directory, step=1, debounce=50, recursive=True):
        for _change, name in changes:
            path = Path(name)
            if path.suffix != ".jsonl":
                continue
            data = read_from(path, offsets.get(path, 0))
            end = data.rfind(b"\n") + 1
            offsets[path] = offsets.get(path, 0) + end
            for line in data[:end].splitlines():
                await mgr.emit("line", line.decode(), room="watch")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument(
        "mode", choices=["clients", "storm", "idle", "sio-pyclient", "sio-server", "sio-tail"]
    )
    p.add_argument("--proto", choices=["relaybus", "floor", "sio"], default="relaybus")
    p.add_argument("--url", default="")
    p.add_argument("--token", default="bench")
    p.add_argument("--sid", default="")
    p.add_argument("--n", type=int, default=1)
    p.add_argument("--count", type=int, default=100)
    p.add_argument("--first", type=int, default=0)
    p.add_argument("--max-s", type=float, default=60.0)
    p.add_argument("--dir", default="")
    p.add_argument("--redis", default="")
    p.add_argument("--channel", default="socketio")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--per-line", action="store_true", help="clients: latency by line index")
    p.add_argument(
        "--blocks-only",
        action="store_true",
        help="relaybus clients ask for what the web client does (blocks_only: no event.data)",
    )
    args = p.parse_args()
    runner = {
        "clients": run_clients,
        "storm": run_storm,
        "idle": run_idle,
        "sio-pyclient": run_sio_pyclient,
        "sio-server": run_sio_server,
        "sio-tail": run_sio_tail,
    }[args.mode]
    asyncio.run(runner(args))


if __name__ == "__main__":
    main()
