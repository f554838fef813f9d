"""Gateway benchmark: end-to-end latency vs a bare-pipeline floor, fan-out, replay, memory.

Real processes on loopback: a private redis-server, ``python -m relaybus.collector``,
``python -m relaybus.gateway``, and client processes (``bench/gateway_workers.py``):

1. latency — one JSONL line every 10 ms (100 lines/s) appended to a transcript; time from
   ``write()`` to the frame received by each of 1, 20 and 100 watching clients, p50/p99;
   next to a floor measured in the same run: the same hops without relaybus
   (watchfiles -> XADD -> XREAD -> websockets broadcast, ``gateway_workers.py floor``);
2. fan-out — 1,000 clients (two client processes) watching 10 sessions, 200 events/s
   appended to the log (Lua append, as the collector does); deliveries/s, p99 from append
   to receipt, clients dropped;
3. replay — ``watch_session`` on a session of 200 events, request to last event, p50/p99;
4. memory — RSS growth of the gateway process per idle connection with 5,000 clients.

Writes ``bench/results/gateway.json``. Usage: ``python bench/gateway_bench.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import redis.asyncio as aioredis
from websockets.asyncio.client import connect

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from rig.procs import Worker, cpu_s, rss_kib  # noqa: E402
from rig.stats import summary  # noqa: E402

from relaybus.shared.store.keys import Keys  # noqa: E402
from tests.support.collector_proc import CollectorProc  # noqa: E402
from tests.support.collector_records import transcript, user_line  # noqa: E402
from tests.support.gateway_publish import Publisher  # noqa: E402
from tests.support.gateway_server import GatewayProc  # noqa: E402
from tests.support.servers import RedisServer, free_port, running_server  # noqa: E402

OUT = REPO / "bench" / "results" / "gateway.json"
TOKEN = "bench"


async def write_lines(path: Path, sid: str, lines: int, rate: float) -> None:
    """Append ``lines`` user lines at ``rate`` per second, each stamped with its write time."""
    start = time.monotonic()
    with open(path, "ab", buffering=0) as f:  # noqa: ASYNC230 - the write itself is measured
        for i in range(lines):
            delay = start + i / rate - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            f.write(user_line(sid, f"lat {time.time_ns()}"))


async def latency_gateway(srv: RedisServer, tmp: Path, n: int, lines: int) -> dict[str, Any]:
    ns = f"lat{uuid.uuid4().hex[:8]}"
    claude = tmp / ns / "claude"
    (claude / "projects").mkdir(parents=True)
    sid = str(uuid.uuid4())
    path = transcript(claude, sid)
    path.write_bytes(user_line(sid, "hello"))
    env = {"RELAYBUS_BACKFILL_EVENTS": "10"}
    with (
        CollectorProc(redis_url=srv.url, namespace=ns, claude_dir=claude, env=env),
        GatewayProc(redis_url=srv.url, namespace=ns, tokens=TOKEN) as gw,
    ):
        client = aioredis.Redis.from_url(srv.url)
        try:
            for _ in range(600):
                if await client.exists(Keys(ns).session(sid)):
                    break
                await asyncio.sleep(0.05)
        finally:
            await client.aclose()
        w = await Worker(
            "clients",
            "--url",
            gw.ws,
            "--token",
            TOKEN,
            "--n",
            str(n),
            "--sids",
            sid,
            "--count",
            str(lines),
        ).start()
        await write_lines(path, sid, lines, 100)
        res = await w.result()
    lat = res["latencies_ms"]
    return {"clients": n, "received": res["received"], "expected": n * lines, **summary(lat)}


async def latency_floor(srv: RedisServer, tmp: Path, n: int, lines: int) -> dict[str, Any]:
    d = tmp / f"floor{uuid.uuid4().hex[:6]}"
    d.mkdir()
    sid = str(uuid.uuid4())
    path = d / f"{sid}.jsonl"
    path.write_bytes(b"")
    port = free_port()
    floor = await Worker("floor", "--dir", str(d), "--redis", srv.url, "--port", str(port)).start()
    try:
        w = await Worker(
            "clients", "--url", f"ws://127.0.0.1:{port}", "--n", str(n), "--count", str(lines)
        ).start()
        await asyncio.sleep(0.5)
        await write_lines(path, sid, lines, 100)
        res = await w.result()
    finally:
        assert floor.proc is not None
        floor.proc.kill()
        await floor.proc.wait()
    lat = res["latencies_ms"]
    return {"clients": n, "received": res["received"], "expected": n * lines, **summary(lat)}


async def fanout(
    srv: RedisServer, clients: int, sessions: int, rate: float, seconds: float
) -> dict[str, Any]:
    ns = f"fan{uuid.uuid4().hex[:8]}"
    client = aioredis.Redis.from_url(srv.url)
    pub = Publisher(client, Keys(ns))
    sids = [f"s{i}" for i in range(sessions)]
    for sid in sids:
        await pub.start_session(sid)
    total = int(rate * seconds)
    per_session = total // sessions
    with GatewayProc(redis_url=srv.url, namespace=ns, tokens=TOKEN) as gw:
        half = clients // 2
        workers = [
            await Worker(
                "clients",
                "--url",
                gw.ws,
                "--token",
                TOKEN,
                "--n",
                str(k),
                "--sids",
                ",".join(sids),
                "--count",
                str(per_session),
                "--idle-s",
                "10",
            ).start()
            for k in (half, clients - half)
        ]
        assert gw.proc is not None
        cpu0 = cpu_s(gw.proc.pid)
        start = time.monotonic()
        for i in range(per_session * sessions):
            delay = start + i / rate - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            await pub.events(sids[i % sessions], [f"lat {time.time_ns()}"])
        sent_s = time.monotonic() - start
        cpu = cpu_s(gw.proc.pid) - cpu0
        results = [await w.result(300) for w in workers]
        metrics = await http_text(f"{gw.http}/metrics")
    await client.aclose()
    lat = [x for r in results for x in r["latencies_ms"]]
    received = sum(r["received"] for r in results)
    slow = next(
        (
            ln
            for ln in metrics.splitlines()
            if ln.startswith("relaybus_gateway_slow_consumer_disconnects_total ")
        ),
        "x 0",
    )
    # Deliveries per second over the publishing window (the rate is sustained only if
    # the p99 stays small: a backlog would show up there).
    return {
        "clients": clients,
        "sessions": sessions,
        "events_per_s": rate,
        "events": per_session * sessions,
        "publish_seconds": round(sent_s, 2),
        "deliveries": received,
        "expected": clients * per_session,
        "deliveries_per_s": round(received / sent_s),
        "gateway_cpu_percent_of_one_core": round(100 * cpu / sent_s, 1),
        "clients_dropped": sum(r["closed"] for r in results),
        "slow_consumer_disconnects": float(slow.split()[1]),
        **summary(lat),
    }


async def replay(srv: RedisServer, repeats: int) -> dict[str, Any]:
    ns = f"rep{uuid.uuid4().hex[:8]}"
    client = aioredis.Redis.from_url(srv.url)
    pub = Publisher(client, Keys(ns))
    await pub.start_session("s1")
    for _ in range(10):
        await pub.events("s1", [f"replayed event {i}" for i in range(20)], data_bytes=800)
    times: list[float] = []
    env = {"RELAYBUS_RATE_LIMIT_PER_S": "100000"}  # 2 requests per replay, back to back
    with GatewayProc(redis_url=srv.url, namespace=ns, tokens=TOKEN, env=env) as gw:
        async with connect(
            gw.ws,
            additional_headers={"Authorization": f"Bearer {TOKEN}"},
            compression=None,
            max_size=None,
        ) as ws:
            await ws.send('{"type":"hello","capabilities":["session_subscriptions"]}')
            await ws.recv()
            for _ in range(repeats):
                t0 = time.perf_counter()
                await ws.send('{"type":"watch_session","sessionId":"s1"}')
                got = 0
                while got < 200:
                    if b'"session_event"' in (await ws.recv(decode=False))[:40]:
                        got += 1
                times.append((time.perf_counter() - t0) * 1000)
                await ws.send('{"type":"unwatch_session","sessionId":"s1"}')
                while b'"watch_ack"' not in (await ws.recv(decode=False))[:40]:
                    pass
    await client.aclose()
    return {"events": 200, "repeats": repeats, **summary(times)}


async def http_text(url: str) -> str:
    async with httpx.AsyncClient() as http:
        return (await http.get(url, timeout=10)).text


async def memory(srv: RedisServer, clients: int) -> dict[str, Any]:
    ns = f"mem{uuid.uuid4().hex[:8]}"
    with GatewayProc(redis_url=srv.url, namespace=ns, tokens=TOKEN) as gw:
        assert gw.proc is not None
        async with connect(gw.ws, additional_headers={"Authorization": f"Bearer {TOKEN}"}) as ws:
            await ws.send('{"type":"hello","capabilities":[]}')
            await ws.recv()
        await asyncio.sleep(1)
        before = rss_kib(gw.proc.pid)
        half = clients // 2
        workers = [
            await Worker("idle", "--url", gw.ws, "--token", TOKEN, "--n", str(k)).start(300)
            for k in (half, clients - half)
        ]
        for _ in range(600):
            text = await http_text(f"{gw.http}/metrics")
            line = next(
                ln for ln in text.splitlines() if ln.startswith("relaybus_gateway_connections ")
            )
            if float(line.split()[1]) >= clients:
                break
            await asyncio.sleep(0.1)
        await asyncio.sleep(2)
        after = rss_kib(gw.proc.pid)
        for w in workers:
            await w.stop()
    return {
        "idle_clients": clients,
        "rss_before_kib": before,
        "rss_after_kib": after,
        "kib_per_connection": round((after - before) / clients, 1),
    }


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        with running_server(tmp / "srv") as srv:
            out: dict[str, Any] = {
                "benchmark": "gateway",
                "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
                "server": srv.kind,
                "ws_compression": False,
            }
            if "latency" in args.only:
                rows = []
                for n in (1, 20, 100):
                    g = await latency_gateway(srv, tmp, n, args.lines)
                    f = await latency_floor(srv, tmp, n, args.lines)
                    rows.append(
                        {
                            **g,
                            "floor": f,
                            "ratio_p50": round(g["p50_ms"] / f["p50_ms"], 2),
                            "ratio_p99": round(g["p99_ms"] / f["p99_ms"], 2),
                        }
                    )
                    print(json.dumps(rows[-1]), flush=True)
                out["latency_100_lines_per_s"] = rows
            if "fanout" in args.only:
                out["fanout"] = await fanout(srv, args.fanout_clients, 10, 200, args.fanout_s)
                print(json.dumps(out["fanout"]), flush=True)
            if "replay" in args.only:
                out["replay"] = await replay(srv, args.replays)
                print(json.dumps(out["replay"]), flush=True)
            if "memory" in args.only:
                out["idle_memory"] = await memory(srv, args.idle_clients)
                print(json.dumps(out["idle_memory"]), flush=True)
    out["load_average_1m_at_end"] = round(os.getloadavg()[0], 2)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--lines", type=int, default=1000, help="lines per latency run (100/s)")
    p.add_argument("--fanout-clients", type=int, default=1000)
    p.add_argument("--fanout-s", type=float, default=15)
    p.add_argument("--replays", type=int, default=200)
    p.add_argument("--idle-clients", type=int, default=5000)
    p.add_argument("--only", default="latency,fanout,replay,memory")
    p.add_argument("--out", type=Path, default=OUT)
    args = p.parse_args()
    out = asyncio.run(main_async(args))
    if args.out:
        args.out.write_text(json.dumps(out, indent=2) + "\n")
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
