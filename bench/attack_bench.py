"""The gateway under replay, ping-flood and slowloris attacks at once.

A real ``python -m relaybus.gateway`` on a private Redis. A separate attacker process keeps, for the
whole run:

* replay: a read-only client that never reads sends 40 ``watch_session{sinceSeqId:0}`` on a
  2,000-event session, and ten never-reading clients send ``hello{lastSeqId:0}``; each is
  reopened as soon as the gateway drops it;
* ping flood: three clients without a token flood pings and never read (reopened likewise);
* slowloris: ``--slowloris`` half-sent HTTP requests, reopened as the gateway closes them.

Meanwhile a normal client watches a live session (one event published every 100 ms) and
sends ``list_sessions`` every 100 ms; the bench records its round-trip and live-event
latencies, and samples the gateway's RSS. Writes ``bench/results/attacks.json``.

    python bench/attack_bench.py [--seconds 30] [--slowloris 1000]
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import resource
import socket
import threading
import time
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis
from rig import REPO
from rig.services import header, scratch, write_result
from rig.stats import summary

from relaybus.shared.store.keys import Keys
from tests.support.gateway_client import FULL, WsClient
from tests.support.gateway_publish import Publisher
from tests.support.gateway_server import GatewayProc
from tests.support.raw_ws import DeafClient, closed_by_peer, rss_bytes, ws_frame

NAMESPACE = "attack"
TOKENS = "bench,bench-ro:read"
MB = 1024 * 1024


# --- the attacker process -------------------------------------------------------------------


def _replayer(port: int, stop: threading.Event, counts: dict[str, int]) -> None:
    while not stop.is_set():
        try:
            c = DeafClient(port, token="bench-ro")
            c.send({"type": "hello", "capabilities": FULL})
            for i in range(40):
                c.send(
                    {
                        "type": "watch_session",
                        "sessionId": "big",
                        "sinceSeqId": 0,
                        "requestId": f"w{i}",
                    }
                )
            counts["replay_connections"] += 1
            _hold_until_dropped(c, stop)
        except OSError:
            time.sleep(0.1)


def _resumer(port: int, stop: threading.Event, counts: dict[str, int]) -> None:
    while not stop.is_set():
        try:
            c = DeafClient(port, token="bench-ro")
            c.send({"type": "hello", "lastSeqId": 0})
            counts["resume_connections"] += 1
            _hold_until_dropped(c, stop)
        except OSError:
            time.sleep(0.1)


def _hold_until_dropped(c: DeafClient, stop: threading.Event) -> None:
    """Never read; notice the drop by a failing send (a ping every 200 ms)."""
    try:
        while not stop.is_set():
            if not c.ping(b"x"):
                return
            time.sleep(0.2)
    finally:
        c.close()


def _flooder(port: int, stop: threading.Event, counts: dict[str, int]) -> None:
    batch = b"".join(ws_frame(b"p" * 125, opcode=0x9) for _ in range(100))
    while not stop.is_set():
        try:
            c = DeafClient(port)
            counts["flood_connections"] += 1
            while not stop.is_set():
                c.sock.sendall(batch)
                counts["flood_bytes"] += len(batch)
        except OSError:
            time.sleep(0.05)


def _slowloris(port: int, n: int, stop: threading.Event, counts: dict[str, int]) -> None:
    held: list[socket.socket] = []
    while not stop.is_set():
        alive = []
        for s in held:
            if closed_by_peer(s):
                s.close()
            else:
                alive.append(s)
        held = alive
        while len(held) < n and not stop.is_set():
            s = socket.socket()
            s.settimeout(2)
            try:
                s.connect(("127.0.0.1", port))
                s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-a: ")
            except OSError:
                s.close()
                break
            held.append(s)
            counts["slowloris_connections"] += 1
        stop.wait(0.5)
    for s in held:
        s.close()


def attacker(port: int, slowloris: int, seconds: float, kinds: list[str], out: Any) -> None:
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    stop = threading.Event()
    counts = dict.fromkeys(
        (
            "replay_connections",
            "resume_connections",
            "flood_connections",
            "flood_bytes",
            "slowloris_connections",
        ),
        0,
    )
    threads = []
    if "replay" in kinds:
        threads.append(threading.Thread(target=_replayer, args=(port, stop, counts)))
        threads += [threading.Thread(target=_resumer, args=(port, stop, counts)) for _ in range(10)]
    if "flood" in kinds:
        threads += [threading.Thread(target=_flooder, args=(port, stop, counts)) for _ in range(3)]
    if "slowloris" in kinds:
        threads.append(threading.Thread(target=_slowloris, args=(port, slowloris, stop, counts)))
    for t in threads:
        t.daemon = True
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join(5)
    out.put(counts)


# --- the measuring side ----------------------------------------------------------------------


async def normal_client(gw: GatewayProc, pub: Publisher, stop: asyncio.Event) -> dict[str, Any]:
    """Round trips of list_sessions and live-event latencies of a well-behaved client."""
    rtt: list[float] = []
    live: list[float] = []
    sent_at: dict[str, float] = {}
    async with WsClient(gw.ws, token="bench") as ws:
        await ws.hello(FULL)
        await ws.watch("live")
        n = 0
        while not stop.is_set():
            n += 1
            text = f"tick {n}"
            sent_at[text] = time.perf_counter()
            await pub.events("live", [text])
            t0 = time.perf_counter()
            await ws.send({"type": "list_sessions", "requestId": f"l{n}"})
            deadline = time.perf_counter() + 10
            got_list = got_event = False
            while not (got_list and got_event) and time.perf_counter() < deadline:
                frame = await ws.recv(10)
                now = time.perf_counter()
                if frame["type"] == "sessions" and frame.get("requestId") == f"l{n}":
                    rtt.append((now - t0) * 1000)
                    got_list = True
                elif frame["type"] == "session_event":
                    blocks = frame.get("event", {}).get("blocks", [])
                    key = blocks[0].get("text") if blocks else None
                    if key in sent_at:
                        live.append((now - sent_at.pop(key)) * 1000)
                        got_event = got_event or key == text
            ws.received.clear()
            await asyncio.sleep(0.1)
    return {"list_sessions_rtt": summary(rtt), "live_event_latency": summary(live)}


async def sample_rss(pid: int, stop: asyncio.Event, out: list[int]) -> None:
    while not stop.is_set():
        out.append(rss_bytes(pid))
        await asyncio.sleep(0.1)


async def run(seconds: float, slowloris: int, kinds: list[str]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    with scratch() as s:
        client = aioredis.Redis.from_url(s.srv.url)
        pub = Publisher(client, Keys(NAMESPACE), session_maxlen=10_000)
        await pub.start_session("big")
        for at in range(0, 2000, 250):
            await pub.events("big", [f"event {i}" for i in range(at, at + 250)], data_bytes=3000)
        await pub.start_session("live")
        gw = GatewayProc(
            redis_url=s.srv.url, namespace=NAMESPACE, tokens=TOKENS, log_path=s.root / "gateway.log"
        )
        gw.start()
        try:
            base = rss_bytes(gw.pid)
            quiet_stop = asyncio.Event()
            quiet = asyncio.create_task(normal_client(gw, pub, quiet_stop))
            await asyncio.sleep(5)
            quiet_stop.set()
            result["baseline"] = await quiet

            queue: Any = multiprocessing.get_context("spawn").Queue()
            proc = multiprocessing.get_context("spawn").Process(
                target=attacker, args=(gw.port, slowloris, seconds, kinds, queue)
            )
            proc.start()
            await asyncio.sleep(2)  # let every attack get going
            stop = asyncio.Event()
            rss: list[int] = []
            sampler = asyncio.create_task(sample_rss(gw.pid, stop, rss))
            measured = asyncio.create_task(normal_client(gw, pub, stop))
            await asyncio.sleep(seconds - 3)
            stop.set()
            result["under_attack"] = await measured
            await sampler
            counts = await asyncio.to_thread(queue.get, True, 30)
            await asyncio.to_thread(proc.join, 30)
            result["attacks"] = counts
            result["gateway_rss_mb"] = {
                "before": round(base / MB, 1),
                "peak_under_attack": round(max(rss) / MB, 1),
                "end": round(rss[-1] / MB, 1),
            }
            result["gateway_log_mb"] = round((s.root / "gateway.log").stat().st_size / MB, 2)
        finally:
            gw.kill()
            await client.aclose()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--slowloris", type=int, default=1000)
    parser.add_argument(
        "--attacks",
        default="replay,flood,slowloris",
        help="comma-separated subset of replay,flood,slowloris",
    )
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "attacks.json")
    args = parser.parse_args()
    result = header("attacks", "redis", load=True)
    kinds = args.attacks.split(",")
    result.update({"seconds": args.seconds, "slowloris": args.slowloris, "attacks_run": kinds})
    result.update(asyncio.run(run(args.seconds, args.slowloris, kinds)))
    p99 = result["under_attack"]["list_sessions_rtt"]["p99_ms"]
    live = result["under_attack"]["live_event_latency"]["p99_ms"]
    rss = result["gateway_rss_mb"]["peak_under_attack"]
    result["done_when"] = {
        "rss_under_200_mb": rss < 200,
        "normal_client_p99_under_100_ms": max(p99, live) < 100,
    }
    write_result(args.out, result)


if __name__ == "__main__":
    main()
