"""Soak: many WebSocket clients on one gateway for minutes, at a steady line rate.

A real collector and gateway on a private server; ``--clients`` clients watch one session
while a writer appends ``--rate`` user lines/s for ``--minutes``. Each line carries its write
time, so every client measures write → frame latency. Reported: the gateway's RSS at the
start and the end, p50/p99 latency for each minute, clients dropped (every client reads
promptly, so any drop is a failure) and lines each client missed or got twice.

Writes ``bench/results/soak.json``. Usage: ``python bench/soak.py --minutes 10 --clients
1000 --rate 100`` (the defaults); on a small box ``--minutes 2 --clients 200 --rate 20``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from _rig import TOKEN, header, pct, scratch, services, write_result  # noqa: E402

from tests.support.collector_records import append, transcript, user_line  # noqa: E402

OUT = REPO / "bench" / "results" / "soak.json"
SID = "50a50a50-0000-4000-8000-000000000050"


def rss_mb(pid: int) -> float:
    for row in Path(f"/proc/{pid}/status").read_text().splitlines():
        if row.startswith("VmRSS:"):
            return round(int(row.split()[1]) / 1024, 1)
    raise RuntimeError("no VmRSS")


async def client(
    url: str, stamps: list[tuple[float, float]], seen: Counter[int], dropped: list[int]
) -> tuple[ClientConnection, asyncio.Task[None]]:
    """A watching client; each soak line it receives adds (receive time, latency ms)."""
    ws = await connect(url, open_timeout=60, compression=None, max_size=None)
    hello = {"type": "hello", "capabilities": ["session_subscriptions"]}
    await ws.send(orjson.dumps(hello).decode())
    await ws.send(orjson.dumps({"type": "watch_session", "sessionId": SID}).decode())

    async def read() -> None:
        try:
            async for raw in ws:
                frame = orjson.loads(raw)
                if frame["type"] != "session_event":
                    continue
                blocks = frame["event"].get("blocks") or []
                text = blocks[0].get("text", "") if blocks else ""
                if text.startswith("soak-"):
                    _, n, t_ns = text.split("-")
                    now = time.time_ns()
                    stamps.append((now / 1e9, (now - int(t_ns)) / 1e6))
                    seen[int(n)] += 1
        except ConnectionClosed:
            pass
        dropped.append(1)

    return ws, asyncio.create_task(read())


async def soak(args: argparse.Namespace) -> dict[str, Any]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(hard, max(soft, args.clients * 2 + 256))
    resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    stamps: list[tuple[float, float]] = []
    seen: list[Counter[int]] = [Counter() for _ in range(args.clients)]
    dropped: list[int] = []
    with scratch() as s:
        path = transcript(s.claude_dir, SID)
        path.write_bytes(user_line(SID, "start"))
        with services(s, SID, {}) as gw:
            url = f"{gw.ws}?token={TOKEN}"
            conns = [await client(url, stamps, seen[i], dropped) for i in range(args.clients)]
            await asyncio.sleep(2)
            rss_start = rss_mb(gw.pid)
            started = time.time()
            n = 0
            t0 = time.monotonic()
            while time.monotonic() - t0 < args.minutes * 60:
                due = int((time.monotonic() - t0) * args.rate)
                if due > n:
                    chunk = b"".join(
                        user_line(SID, f"soak-{i}-{time.time_ns()}") for i in range(n, due)
                    )
                    append(path, chunk)
                    n = due
                await asyncio.sleep(0.01)
            for _ in range(150):  # up to 30 s for the last lines to arrive
                if all(len(c) >= n for c in seen):
                    break
                await asyncio.sleep(0.2)
            rss_end = rss_mb(gw.pid)
            dropped_during = len(dropped)
            for ws, task in conns:
                await ws.close()
                await task
    by_minute: dict[int, list[float]] = {}
    for at, ms in stamps:
        by_minute.setdefault(int((at - started) // 60), []).append(ms)
    return {
        "minutes": args.minutes,
        "clients": args.clients,
        "rate_lines_per_s": args.rate,
        "lines": n,
        "frames_delivered": sum(sum(c.values()) for c in seen),
        "gateway_rss_mb": {"start": rss_start, "end": rss_end},
        "latency_by_minute": [
            {"minute": m + 1, "n": len(v), "p50_ms": pct(v, 0.5), "p99_ms": pct(v, 0.99)}
            for m, v in sorted(by_minute.items())
        ],
        "clients_dropped": dropped_during,
        "clients_missing_lines": sum(1 for c in seen if len(c) < n),
        "duplicates": sum(v - 1 for c in seen for v in c.values() if v > 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--minutes", type=float, default=10)
    ap.add_argument("--clients", type=int, default=1000)
    ap.add_argument("--rate", type=float, default=100, help="lines/s")
    args = ap.parse_args()
    result = header("soak", "redis", load=True) | asyncio.run(soak(args))
    result["load_average_1m_at_end"] = round(os.getloadavg()[0], 2)
    write_result(OUT, result)


if __name__ == "__main__":
    main()
