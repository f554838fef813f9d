"""Soak: many WebSocket clients on one gateway for minutes, at a steady line rate.

A real collector and gateway on a private server; ``--clients`` clients watch one session
while a writer appends ``--rate`` user lines/s for ``--minutes``. Each line carries its write
time, so every client measures write → frame latency. Reported: the gateway's RSS at the
start, every minute and the end, p50/p99 latency for each minute, clients dropped (every
client reads promptly, so any drop is a failure) and lines each client missed or got twice.

The clients run in ``--workers`` processes on the minimal client of
``bench/gateway_workers.py`` (a Python ``websockets`` client per connection costs more CPU
than the gateway it measures); each worker keeps per-minute latency histograms (1 ms
buckets) and per-client line counts, and reports them once at the end.

Writes ``bench/results/soak.json``. Usage: ``python bench/soak.py --minutes 10 --clients
1000 --rate 100`` (the defaults); on a small box ``--minutes 2 --clients 200 --rate 20``.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import orjson

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from rig.clients import RawClient, open_client, parse  # noqa: E402
from rig.procs import rss_kib  # noqa: E402
from rig.services import TOKEN, header, scratch, services, write_result  # noqa: E402

from tests.support.collector_records import append, transcript, user_line  # noqa: E402

OUT = REPO / "bench" / "results" / "soak.json"
SID = "50a50a50-0000-4000-8000-000000000050"
#: Latencies above this land in the last histogram bucket.
MAX_BUCKET_MS = 60_000


def rss_mb(pid: int) -> float:
    return round(rss_kib(pid) / 1024, 1)


def raise_fd_limit(n: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, n)), hard))


# -- worker process: N clients, histograms per minute -------------------------------------


async def worker(args: argparse.Namespace) -> None:
    raise_fd_limit(args.n * 2 + 64)
    clients = [await open_client(args.url, TOKEN, SID) for _ in range(args.n)]
    t0_ns = args.t0_ns
    hist: dict[int, Counter[int]] = {}
    counts = [Counter[int]() for _ in clients]
    closed: list[str] = []
    print("READY", flush=True)

    async def drain(i: int, c: RawClient) -> None:
        try:
            while True:
                frames = await c.frames()
                now = time.time_ns()
                for raw in frames:
                    got = parse(raw)
                    if got is None:
                        continue
                    wrote_ns, idx = got
                    minute = (wrote_ns - t0_ns) // 60_000_000_000  # of writing
                    ms = min(int((now - wrote_ns) / 1e6), MAX_BUCKET_MS)
                    hist.setdefault(minute, Counter())[ms] += 1
                    counts[i][idx] += 1
        except (ConnectionError, OSError) as exc:
            closed.append(str(exc)[:120])

    tasks = [asyncio.create_task(drain(i, c)) for i, c in enumerate(clients)]
    # The parent writes the number of lines once it stopped writing; wait (bounded) for them.
    line = await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    total = int(line.split()[1])
    deadline = time.monotonic() + args.settle_s
    while time.monotonic() < deadline and any(len(c) < total for c in counts):  # noqa: ASYNC110
        await asyncio.sleep(0.2)  # polled: counts change in every drain task
    for t in tasks:
        t.cancel()
    for c in clients:
        c.close()
    out = {
        "hist": {m: dict(h) for m, h in hist.items()},
        "closed": closed,
        "missing": sum(total - len(c) for c in counts if len(c) < total),
        "clients_missing": sum(1 for c in counts if len(c) < total),
        "duplicates": sum(v - 1 for c in counts for v in c.values() if v > 1),
    }
    sys.stdout.write(orjson.dumps(out, option=orjson.OPT_NON_STR_KEYS).decode() + "\n")
    sys.stdout.flush()


# -- parent: services, writer, figures ------------------------------------------------------


def quantile(hist: Counter[int], q: float) -> int | None:
    total = sum(hist.values())
    if not total:
        return None
    want, run = q * total, 0
    for ms in sorted(hist):
        run += hist[ms]
        if run >= want:
            return ms
    return max(hist)


def minute_row(minute: int, hist: Counter[int]) -> dict[str, Any]:
    return {
        "minute": minute + 1,
        "n": sum(hist.values()),
        "p50_ms": quantile(hist, 0.5),
        "p99_ms": quantile(hist, 0.99),
        "max_ms": max(hist),
    }


async def soak(args: argparse.Namespace) -> dict[str, Any]:
    raise_fd_limit(args.clients * 2 + 256)
    t0_ns = (time.time_ns() // 60_000_000_000 + 2) * 60_000_000_000  # writing starts then
    with scratch() as s:
        path = transcript(s.claude_dir, SID)
        path.write_bytes(user_line(SID, "start"))
        with services(s, SID, {}) as gw:
            per = [args.clients // args.workers + (i < args.clients % args.workers)
                   for i in range(args.workers)]  # fmt: skip
            procs = []
            for n in per:
                p = await asyncio.create_subprocess_exec(
                    sys.executable, __file__, "--worker", "--n", str(n), "--url", gw.ws,
                    "--t0-ns", str(t0_ns), "--settle-s", str(args.settle_s),
                    stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                    limit=1 << 26,  # the report is one line of histograms
                )  # fmt: skip
                assert p.stdout is not None
                ready = await asyncio.wait_for(p.stdout.readline(), 600)
                if ready.strip() != b"READY":
                    raise RuntimeError(f"client worker failed: {ready!r}")
                procs.append(p)
            if time.time_ns() > t0_ns:
                raise RuntimeError("the clients took more than a minute to connect")
            await asyncio.sleep((t0_ns - time.time_ns()) / 1e9)
            rss = [rss_mb(gw.pid)]
            n, t0 = 0, time.monotonic()
            next_minute = 60.0
            while (elapsed := time.monotonic() - t0) < args.minutes * 60:
                due = int(elapsed * args.rate)
                if due > n:
                    stamp = time.time_ns()
                    append(path, b"".join(
                        user_line(SID, f"lat {stamp} {i:06d} soak") for i in range(n, due)
                    ))  # fmt: skip
                    n = due
                if elapsed >= next_minute:
                    rss.append(rss_mb(gw.pid))
                    next_minute += 60
                await asyncio.sleep(0.005)
            reports = []
            for p in procs:
                assert p.stdin is not None and p.stdout is not None
                p.stdin.write(f"done {n}\n".encode())
                await p.stdin.drain()
            for p in procs:
                assert p.stdout is not None
                reports.append(orjson.loads(await p.stdout.readline()))
                await p.wait()
            rss.append(rss_mb(gw.pid))
    by_minute: dict[int, Counter[int]] = {}
    for r in reports:
        for m, h in r["hist"].items():
            by_minute.setdefault(int(m), Counter()).update({int(k): v for k, v in h.items()})
    return {
        "minutes": args.minutes,
        "clients": args.clients,
        "client_workers": args.workers,
        "rate_lines_per_s": args.rate,
        "lines": n,
        "frames_delivered": sum(sum(h.values()) for h in by_minute.values()),
        "frames_expected": n * args.clients,
        "gateway_rss_mb": {"start": rss[0], "end": rss[-1], "each_minute": rss},
        "latency_by_minute": [minute_row(m, h) for m, h in sorted(by_minute.items()) if m >= 0],
        "clients_dropped": sum(len(r["closed"]) for r in reports),
        "drop_reasons": sorted({c for r in reports for c in r["closed"]})[:5],
        "clients_missing_lines": sum(r["clients_missing"] for r in reports),
        "lines_missing": sum(r["missing"] for r in reports),
        "duplicates": sum(r["duplicates"] for r in reports),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--minutes", type=float, default=10)
    ap.add_argument("--clients", type=int, default=1000)
    ap.add_argument("--rate", type=float, default=100, help="lines/s")
    ap.add_argument("--workers", type=int, default=4, help="client processes")
    ap.add_argument("--settle-s", type=float, default=30, help="catch-up allowed at the end")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--n", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--url", default="", help=argparse.SUPPRESS)
    ap.add_argument("--t0-ns", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        asyncio.run(worker(args))
        return
    result = header("soak", "redis", load=True) | asyncio.run(soak(args))
    write_result(OUT, result)
    bad = result["clients_dropped"] or result["lines_missing"] or result["duplicates"]
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
