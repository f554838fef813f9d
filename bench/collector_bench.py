"""Collector benchmark: publish throughput, append latency, and a bare XADD baseline.

Runs a real ``python -m relaybus.collector`` against a private Redis-compatible server:

* throughput — the fixture transcripts (a realistic mix of record types and sizes),
  repeated to ``--lines`` lines, dropped into the claude dir at once; lines/s from the
  write until the file's offset is committed;
* latency — one line every 10 ms (100 lines/s) for ``--latency-s`` seconds; time from
  ``write()`` to the event being readable in ``{ns}:log`` (XREAD BLOCK), p50/p99, next to
  the watchfiles wake-up alone (same step/debounce) measured in the same run;
* baseline — the same lines XADDed by a bare pipelined client, batches of 500.

Throughput and baseline run ``--repeat`` times each and keep the best run (the box is
shared; the load average is recorded with the figures).

Writes ``bench/results/collector.json``. Usage: ``python bench/collector_bench.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, cast

import orjson
import redis

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from rig.collector import drop_transcript, fixture_lines  # noqa: E402
from rig.stats import pct  # noqa: E402

from relaybus.shared.store.keys import Keys  # noqa: E402
from tests.support.collector_proc import CollectorProc  # noqa: E402
from tests.support.collector_records import Entries, transcript, user_line  # noqa: E402
from tests.support.servers import RedisServer, server_binaries  # noqa: E402

OUT = REPO / "bench" / "results" / "collector.json"


def throughput(
    srv: RedisServer, claude: Path, lines: list[bytes], ns: str, env: dict[str, str] | None = None
) -> dict[str, Any]:
    (claude / "projects").mkdir(parents=True)
    (claude / "sessions").mkdir()
    client = srv.client()
    proc = CollectorProc(
        redis_url=srv.url, namespace=ns, claude_dir=claude, host_id="bench", env=env
    )
    proc.start()
    try:
        data = b"".join(lines)
        cpu0, rcpu0 = proc_cpu_s(proc.pid), redis_cpu_s(client)
        elapsed = drop_transcript(client, claude, ns, data)
        cpu, rcpu = proc_cpu_s(proc.pid) - cpu0, redis_cpu_s(client) - rcpu0
        events = int(client.get(Keys(ns).seq) or 0)
    finally:
        proc.stop()
        client.close()
    per_line_us = {"collector": cpu / len(lines) * 1e6, "redis": rcpu / len(lines) * 1e6}
    return {
        "cpu_us_per_line": {k: round(v, 1) for k, v in per_line_us.items()},
        # What the pipeline sustains when each process has a core (load-independent).
        "capacity_lines_per_s_one_core_each": round(1e6 / max(per_line_us.values())),
        "lines": len(lines),
        "bytes": len(data),
        "events_published": events,
        "seconds": round(elapsed, 3),
        "lines_per_s": round(len(lines) / elapsed),
        "events_per_s": round(events / elapsed),
        "mb_per_s": round(len(data) / elapsed / 1e6, 1),
    }


def proc_cpu_s(pid: int) -> float:
    """user+system CPU seconds of a process (from /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def redis_cpu_s(client: redis.Redis) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def bare_xadd(srv: RedisServer, lines: list[bytes], ns: str) -> dict[str, Any]:
    client = srv.client()
    key = f"{Keys(ns).prefix}bare"
    t0 = time.perf_counter()
    for i in range(0, len(lines), 500):
        pipe = client.pipeline(transaction=False)
        for ln in lines[i : i + 500]:
            pipe.xadd(key, {"s": "bench", "k": "session_event", "f": ln, "t": "0"}, maxlen=100_000)
        pipe.execute()
    elapsed = time.perf_counter() - t0
    client.delete(key)
    client.close()
    return {
        "lines": len(lines),
        "seconds": round(elapsed, 3),
        "lines_per_s": round(len(lines) / elapsed),
    }


def watch_wakeups(dirpath: Path, stamps: dict[str, float], stop: threading.Event) -> None:
    """watchfiles alone, same tuning as the collector: when did each append wake it?"""
    from watchfiles import watch

    for _changes in watch(dirpath, step=1, debounce=50, stop_event=stop, recursive=True):
        stamps[f"w{len(stamps)}"] = time.perf_counter()


def latency(
    srv: RedisServer, claude: Path, ns: str, seconds: float, env: dict[str, str] | None = None
) -> dict[str, Any]:
    client = srv.client()
    reader = redis.Redis(port=srv.port, socket_timeout=10)
    proc = CollectorProc(
        redis_url=srv.url, namespace=ns, claude_dir=claude, host_id="bench-lat", env=env
    )
    proc.start()
    sid = "bench-latency"
    path = transcript(claude, sid)
    written: dict[str, float] = {}
    received: dict[str, float] = {}
    wake_dir = Path(tempfile.mkdtemp(prefix="wake-", dir=claude.parent))
    wake_stamps: dict[str, float] = {}
    wake_written: list[float] = []
    stop = threading.Event()
    watcher = threading.Thread(target=watch_wakeups, args=(wake_dir, wake_stamps, stop))
    watcher.start()
    done = threading.Event()

    def read_log() -> None:
        last = client.get(Keys(ns).seq) or b"0"
        cursor = f"{int(last)}-0"
        while not done.is_set():
            reply = cast(
                list[tuple[bytes, Entries]] | None,
                reader.xread({Keys(ns).log: cursor}, block=200),
            )
            for _key, entries in reply or []:
                now = time.perf_counter()
                for entry_id, fields in entries:
                    cursor = entry_id.decode()
                    frame = orjson.loads(fields[b"f"])
                    if frame["type"] == "session_event":
                        blocks = frame["event"]["blocks"]
                        if blocks and blocks[0].get("text", "").startswith("lat-"):
                            received[blocks[0]["text"]] = now

    t = threading.Thread(target=read_log)
    t.start()
    try:
        path.write_bytes(user_line(sid, "warm-up"))
        time.sleep(1.0)
        n = int(seconds * 100)
        lines = [user_line(sid, f"lat-{i}") for i in range(n)]
        start = time.perf_counter()
        with open(path, "ab", buffering=0) as f, open(wake_dir / "w.jsonl", "ab", buffering=0) as w:
            for i, ln in enumerate(lines):
                target = start + i * 0.01
                delay = target - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)
                written[f"lat-{i}"] = time.perf_counter()
                f.write(ln)
                if i % 2 == 0:  # interleaved: the wake-up probe must not share a wake-up
                    time.sleep(0.004)
                    wake_written.append(time.perf_counter())
                    w.write(b"x\n")
        deadline = time.monotonic() + 30
        while len(received) < n and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        done.set()
        stop.set()
        t.join(10)
        watcher.join(10)
        proc.stop()
        client.close()
        reader.close()
    lat = [(received[k] - written[k]) * 1000 for k in written if k in received]
    wakes = sorted(wake_stamps.values())
    wake_lat = []
    j = 0
    for tw in wake_written:
        while j < len(wakes) and wakes[j] < tw:
            j += 1
        if j < len(wakes):
            wake_lat.append((wakes[j] - tw) * 1000)
    return {
        "rate_lines_per_s": 100,
        "lines": len(written),
        "received": len(lat),
        "p50_ms": round(pct(lat, 0.50), 2),
        "p99_ms": round(pct(lat, 0.99), 2),
        "max_ms": round(max(lat), 2),
        "mean_ms": round(statistics.fmean(lat), 2),
        "watchfiles_wakeup_p50_ms": round(pct(wake_lat, 0.50), 2) if wake_lat else None,
        "watchfiles_wakeup_p99_ms": round(pct(wake_lat, 0.99), 2) if wake_lat else None,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=60_000)
    ap.add_argument("--latency-s", type=float, default=10.0)
    ap.add_argument("--repeat", type=int, default=3, help="throughput runs; the best is kept")
    args = ap.parse_args()
    kinds = server_binaries()
    kind = "redis" if "redis" in kinds else "valkey"
    base = fixture_lines()
    lines = (base * (args.lines // len(base) + 1))[: args.lines]
    with tempfile.TemporaryDirectory(prefix="collector-bench-") as tmp:
        root = Path(tmp)
        srv = RedisServer(kind, kinds[kind], root / "srv")
        srv.start()
        try:
            claude = root / "claude"
            runs = [
                throughput(srv, claude / f"r{i}", lines, f"bench{i}") for i in range(args.repeat)
            ]
            bares = [bare_xadd(srv, lines, f"bench{i}") for i in range(args.repeat)]
            tp = max(runs, key=lambda r: r["lines_per_s"])
            tp["all_runs_lines_per_s"] = [r["lines_per_s"] for r in runs]
            bare = max(bares, key=lambda r: r["lines_per_s"])
            bare["all_runs_lines_per_s"] = [r["lines_per_s"] for r in bares]
            claude_lat = root / "claude-latency"
            (claude_lat / "projects").mkdir(parents=True)
            (claude_lat / "sessions").mkdir()
            lat = latency(srv, claude_lat, "benchlat", args.latency_s)
        finally:
            srv.stop()
    result = {
        "benchmark": "collector",
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "server": kind,
        "throughput": tp,
        "bare_xadd_pipeline": bare,
        "ratio_collector_to_bare_xadd": round(tp["lines_per_s"] / bare["lines_per_s"], 3),
        "note": "best of --repeat runs on a shared 2-core box; see load_average_1m_at_end",
        "latency_100_lines_per_s": lat,
        "target_lines_per_s": 20_000,
        "load_average_1m_at_end": round(os.getloadavg()[0], 2),
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
