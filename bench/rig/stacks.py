"""The systems ``compare.py`` measures (relaybus, python-socketio, the bare floor, the lean
floor) as stacks with one client, the timed lines written to them, and the workloads the A/B
benches reuse (latency at a rate with CPU per delivery of each server process, the quiet
CPU, the reconnect storm)."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import orjson
import redis.asyncio as aioredis

from relaybus.shared.store.keys import Keys
from rig import REPO
from rig.procs import Worker, cpu_s, cpu_split_s, rss_kib
from rig.stats import summary
from tests.support.collector_proc import CollectorProc
from tests.support.collector_records import transcript, user_line
from tests.support.gateway_server import GatewayProc
from tests.support.servers import RedisServer, free_port

WORKERS = REPO / "bench" / "compare_workers.py"
FIXTURE = (
    REPO
    / "tests"
    / "data"
    / "claude-jsonl"
    / "marot__spotter__4d5611e5-241a-462a-8d15-5122611a9569.jsonl"
)
TOKEN = "bench"
#: Replaced in each prepared line at the moment it is written.
PLACE = b"lat 0000000000000000000 000000"


@dataclass(frozen=True)
class Plan:
    """What one run measures; ``--quick`` scales every workload down."""

    latency_clients: tuple[int, ...]
    latency_lines: int
    ladder: tuple[int, ...]
    ladder_s: float
    storm_clients: int
    storm_lines: int
    idle_clients: int
    nginx_gateways: tuple[int, ...]
    nginx_clients: int
    nginx_s: float
    nginx_rate: float
    grace_s: float


FULL = Plan(
    (1, 20, 100, 300, 1000),
    600,
    (100, 200, 400, 800, 1600, 3200),
    4.0,
    1000,
    1000,
    1000,
    (1, 2),
    500,
    8.0,
    100.0,
    15.0,
)
QUICK = Plan(
    (1, 20, 100, 300), 150, (200, 800, 3200), 2.0, 200, 300, 300, (1, 2), 200, 3.0, 100.0, 5.0
)


def filler(size: int = 1700) -> str:
    """Assistant prose from a fixture transcript, ``size`` characters of it."""
    texts: list[str] = []
    for raw in FIXTURE.read_bytes().splitlines():
        rec = orjson.loads(raw)
        if rec.get("type") == "assistant":
            texts += [c["text"] for c in rec["message"]["content"] if c.get("type") == "text"]
    return " ".join(texts)[:size]


FILLER = filler()


class CWorker(Worker):
    """A ``compare_workers.py`` subprocess (READY, then one JSON line)."""

    script = WORKERS

    async def say(self, text: str) -> None:
        assert self.proc is not None and self.proc.stdin is not None
        self.proc.stdin.write(text.encode() + b"\n")
        await self.proc.stdin.drain()

    async def expect(self, word: bytes, timeout_s: float = 60) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        line = await asyncio.wait_for(self.proc.stdout.readline(), timeout_s)
        if line.strip() != word:
            raise RuntimeError(f"worker said {line!r}, not {word!r}")

    def kill(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.kill()


async def write_lines(path: Path, sid: str, count: int, rate: float, first: int = 0) -> float:
    """Append ``count`` timed lines at ``rate``/s (each stamped as it is written); seconds."""
    lines = [user_line(sid, f"{PLACE.decode()} {FILLER}") for _ in range(count)]
    start = time.monotonic()
    with open(path, "ab", buffering=0) as f:  # noqa: ASYNC230 - the write itself is measured
        for i, line in enumerate(lines):
            delay = start + i / rate - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            f.write(line.replace(PLACE, b"lat %d %06d" % (time.time_ns(), first + i), 1))
    return time.monotonic() - start


@dataclass
class Stack:
    """One system, up for the whole run: where clients connect and where lines go."""

    name: str
    proto: str
    url: str
    pid: int  # the serving process (the one clients connect to)
    new_target: Callable[[], Awaitable[tuple[str, Path]]]
    stop: Callable[[], Awaitable[None]]
    #: Every server process of the system by role (the serving one included).
    procs: dict[str, int]
    #: More arguments for its client workers (``--blocks-only``: relaybus's web client's hello).
    client_flags: tuple[str, ...] = ()
    #: relaybus: the log stream its collector appends to.
    log_key: str | None = None

    def clients(self, sid: str, n: int) -> list[str]:
        """The arguments every client worker of this system takes."""
        return [*client_args(self.proto, self.url, sid, n), *self.client_flags]


def client_args(proto: str, url: str, sid: str, n: int) -> list[str]:
    return ["--proto", proto, "--url", url, "--token", TOKEN, "--sid", sid, "--n", str(n)]


async def relaybus_stack(
    srv: RedisServer,
    tmp: Path,
    *,
    name: str = "relaybus",
    collector_env: dict[str, str] | None = None,
) -> Stack:
    """``collector_env`` (e.g. a ``PYTHONPATH`` to another tree) goes to the collector only."""
    ns = f"cmp{uuid.uuid4().hex[:6]}"
    claude = tmp / name / "claude"
    (claude / "projects").mkdir(parents=True)
    (claude / "sessions").mkdir()
    col = CollectorProc(
        redis_url=srv.url,
        namespace=ns,
        claude_dir=claude,
        env={"RELAYBUS_BACKFILL_EVENTS": "10", **(collector_env or {})},
    )
    gw = GatewayProc(
        redis_url=srv.url, namespace=ns, tokens=TOKEN, env={"RELAYBUS_RATE_LIMIT_PER_S": "100000"}
    )
    col.start()
    gw.start()
    assert gw.proc is not None

    async def new_target() -> tuple[str, Path]:
        return await published_session(srv.url, ns, claude)

    async def stop() -> None:
        gw.kill()
        col.stop()

    procs = {"collector": col.pid, "gateway": gw.proc.pid}
    return Stack(
        name, "relaybus", gw.ws, gw.proc.pid, new_target, stop, procs, log_key=Keys(ns).log
    )


async def phone_stack(stacks: list[Stack], srv: RedisServer, tmp: Path) -> Stack:
    """relaybus as its web client sees it: the clients ask for ``blocks_only`` (no
    ``event.data``, about half of each frame). The relaybus stack's own processes when it
    runs too (interleaved with it, so a ratio between the two is of one server)."""
    flags = ("--blocks-only",)
    base = next((st for st in stacks if st.name == "relaybus"), None)
    if base is None:
        return replace(await relaybus_stack(srv, tmp, name="relaybus-phone"), client_flags=flags)

    async def stopped_with_base() -> None:
        pass

    return replace(base, name="relaybus-phone", client_flags=flags, stop=stopped_with_base)


async def published_session(redis_url: str, ns: str, claude: Path) -> tuple[str, Path]:
    """A new transcript with one line, once the collector has published its session."""
    sid = str(uuid.uuid4())
    path = transcript(claude, sid)
    path.write_bytes(user_line(sid, "hello"))
    client = aioredis.Redis.from_url(redis_url)
    try:
        for _ in range(600):
            if await client.exists(Keys(ns).session(sid)):
                return sid, path
            await asyncio.sleep(0.02)
    finally:
        await client.aclose()
    raise RuntimeError("relaybus did not publish the session")


def file_target(d: Path) -> Callable[[], Awaitable[tuple[str, Path]]]:
    async def new_target() -> tuple[str, Path]:
        sid = str(uuid.uuid4())
        path = d / f"{sid}.jsonl"
        path.write_bytes(b"")
        await asyncio.sleep(0.1)  # the tailer sees the file before its first line
        return sid, path

    return new_target


async def socketio_stack(srv: RedisServer, tmp: Path) -> Stack:
    d = tmp / "socketio"
    d.mkdir()
    port = free_port()
    channel = f"sio{uuid.uuid4().hex[:6]}"
    server = await CWorker(
        "sio-server", "--redis", srv.url, "--port", str(port), "--channel", channel
    ).start()
    tail = await CWorker(
        "sio-tail", "--dir", str(d), "--redis", srv.url, "--channel", channel
    ).start()
    assert server.proc is not None and tail.proc is not None

    async def stop() -> None:
        for w in (tail, server):
            w.kill()
            if w.proc is not None:
                await w.proc.wait()

    url = f"ws://127.0.0.1:{port}"
    procs = {"server": server.proc.pid, "tailer": tail.proc.pid}
    return Stack("socketio", "sio", url, server.proc.pid, file_target(d), stop, procs)


async def one_process_stack(
    name: str, srv: RedisServer, tmp: Path, mode: str | None = None, *args: str
) -> Stack:
    """A floor: one ``gateway_workers.py <mode>`` process (``mode`` defaults to ``name``)
    serving plain broadcast; ``args`` go to it."""
    d = tmp / name
    d.mkdir()
    port = free_port()
    floor = await Worker(
        mode or name, "--dir", str(d), "--redis", srv.url, "--port", str(port), *args
    ).start()
    assert floor.proc is not None
    proc = floor.proc

    async def stop() -> None:
        if proc.returncode is None:
            proc.kill()
        await proc.wait()

    url = f"ws://127.0.0.1:{port}"
    return Stack(name, "floor", url, proc.pid, file_target(d), stop, {name: proc.pid})


async def floor_stack(srv: RedisServer, tmp: Path) -> Stack:
    """watchfiles -> XADD -> XREAD -> ``websockets.broadcast`` (the second reference)."""
    return await one_process_stack("floor", srv, tmp)


async def lean_stack(srv: RedisServer, tmp: Path) -> Stack:
    """inotify -> pipelined XADD -> XREAD -> one frame to every transport (the reference)."""
    return await one_process_stack("lean", srv, tmp)


async def lean_full_stack(srv: RedisServer, tmp: Path) -> Stack:
    """The lean floor sending each line twice a frame: the bytes of relaybus's full frame."""
    return await one_process_stack("lean-full", srv, tmp, "lean", "--copies", "2")


def cpu_of(st: Stack) -> dict[str, float]:
    """CPU seconds so far of each server process of ``st``."""
    return {role: cpu_s(pid) for role, pid in st.procs.items()}


def cpu_us_per_delivery(
    before: dict[str, float], after: dict[str, float], deliveries: int
) -> dict[str, float | None]:
    """Each process's CPU between two readings, in µs per delivery (and ``total``)."""
    used = {role: after[role] - before[role] for role in before}
    used["total"] = sum(used.values())
    return {r: round(v / deliveries * 1e6, 1) if deliveries else None for r, v in used.items()}


async def idle_rss(st: Stack, n: int) -> dict[str, Any]:
    """Growth of the serving process's RSS with ``n`` idle clients connected (watching a
    session where the system has one), in KiB per connection."""
    sid, _path = await st.new_target()
    await asyncio.sleep(1)
    before = rss_kib(st.pid)
    w = await CWorker("idle", *st.clients(sid, n)).start(300)
    await asyncio.sleep(2)
    after = rss_kib(st.pid)
    await w.stop()
    return {
        "system": st.name,
        "idle_clients": n,
        "rss_before_kib": before,
        "rss_after_kib": after,
        "kib_per_connection": round((after - before) / n, 1),
    }


async def quiet(st: Stack, seconds: float) -> dict[str, Any]:
    """CPU seconds of each server process over ``seconds`` with one client and no lines."""
    sid, _path = await st.new_target()
    w = await CWorker("idle", *st.clients(sid, 1)).start(60)
    await asyncio.sleep(0.5)  # the connection's own start-up is not the quiet cost
    before = cpu_of(st)
    await asyncio.sleep(seconds)
    after = cpu_of(st)
    await w.stop()
    used = {role: round(after[role] - before[role], 3) for role in before}
    return {"system": st.name, "seconds": seconds, "cpu_s": used, "total_cpu_s": sum(used.values())}


def counted(lat: list[float], expected: int) -> dict[str, Any]:
    """The latency summary of ``expected`` deliveries, of which ``lat`` arrived."""
    return {
        "received": len(lat),
        "expected": expected,
        "lost": expected - len(lat),
        **summary(lat),
        "late_over_10s": sum(1 for x in lat if x > 10_000),
    }


async def latency_run(st: Stack, n: int, lines: int, rate: float, grace_s: float) -> dict[str, Any]:
    """``lines`` timed lines at ``rate``/s to ``n`` clients of ``st``; bounded by ``grace_s``."""
    sid, path = await st.new_target()
    w = await CWorker(
        "clients",
        *st.clients(sid, n),
        "--count",
        str(lines),
        "--max-s",
        str(lines / rate + grace_s),
    ).start(300)
    cpu0, all0, split0 = cpu_s(st.pid), cpu_of(st), cpu_split_s(st.pid)
    seconds = await write_lines(path, sid, lines, rate)
    res = await w.result(lines / rate + grace_s + 60)
    cpu, all1, split1 = cpu_s(st.pid) - cpu0, cpu_of(st), cpu_split_s(st.pid)
    got = len(res["latencies_ms"])
    return {
        "system": st.name,
        "clients": n,
        "lines_per_s": rate,
        "server_cpu_s": round(cpu, 2),
        # CPU per delivery (a line received by one client) of each server process, read
        # from /proc: it does not depend on where the clients run.
        "cpu_us_per_delivery": cpu_us_per_delivery(all0, all1, got),
        # The serving process's share of it in user and in system (kernel) time.
        "serving_user_system_us": [
            round((b - a) / got * 1e6, 2) if got else None
            for a, b in zip(split0, split1, strict=True)
        ],
        # The client process's own CPU (one Python process for all n clients): when it is
        # several times the server's, the latency measured is mostly the clients' backlog.
        "clients_cpu_s": res.get("cpu_s"),
        "write_s": round(seconds, 2),
        **counted(res["latencies_ms"], n * lines),
    }


async def storm(stacks: list[Stack], plan: Plan) -> list[dict[str, Any]]:
    """All clients drop, ``storm_lines`` lines are written, all reconnect at once."""
    rows = []
    for st in stacks:
        sid, path = await st.new_target()
        await write_lines(path, sid, 5, 100, first=900_000)  # relaybus clients get a seqId
        w = await CWorker(
            "storm",
            *st.clients(sid, plan.storm_clients),
            "--count",
            str(plan.storm_lines),
            "--first",
            "0",
            "--max-s",
            str(2 * plan.grace_s),
        ).start(300)
        await write_lines(path, sid, 5, 100, first=900_005)
        await asyncio.sleep(1)
        await w.say("drop")
        await w.expect(b"DROPPED")
        await write_lines(path, sid, plan.storm_lines, 1000)
        await asyncio.sleep(1)  # the lines are in the system before anyone is back
        await w.say("resume")
        res = await w.result(2 * plan.grace_s + 120)
        rows.append({"system": st.name, **res})
        print(json.dumps(rows[-1]), flush=True)
    return rows
