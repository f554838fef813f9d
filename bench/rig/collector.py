"""A real collector's two measures (throughput of a dropped transcript, append latency), its
input (the fixture transcripts) and the wait for its committed offsets."""

from __future__ import annotations

import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, cast

import orjson
import redis

from relaybus.shared.store.keys import Keys
from rig import REPO
from rig.procs import cpu_s
from rig.stats import pct
from tests.support.collector_proc import CollectorProc
from tests.support.collector_records import Entries, transcript, user_line
from tests.support.servers import RedisServer

FIXTURES = REPO / "tests" / "data" / "claude-jsonl"


def fixture_lines() -> list[bytes]:
    lines: list[bytes] = []
    for p in sorted(FIXTURES.glob("*.jsonl")):
        lines += [ln + b"\n" for ln in p.read_bytes().splitlines() if ln.strip()]
    return lines


def wait_committed(
    client: redis.Redis | redis.RedisCluster, key: str, field: str, size: int, timeout_s: float
) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        v = client.hget(key, field)
        if isinstance(v, bytes) and int(v.split(b":")[0]) >= size:
            return
        time.sleep(0.002)
    raise TimeoutError(f"{field} not committed to {size}")


def drop_transcript(
    client: redis.Redis | redis.RedisCluster, claude: Path, ns: str, data: bytes
) -> float:
    """Make ``data`` appear at once as a new transcript (a rename) and wait until the
    collector (host ``bench``) committed all of it; the seconds that took."""
    staging = claude / "staging.tmp"
    staging.write_bytes(data)
    path = transcript(claude, "bench-throughput")
    t0 = time.perf_counter()
    staging.rename(path)
    field = path.relative_to(claude).as_posix()
    wait_committed(client, Keys(ns).offsets("bench"), field, len(data), 300)
    return time.perf_counter() - t0


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
        cpu0, rcpu0 = cpu_s(proc.pid), redis_cpu_s(client)
        elapsed = drop_transcript(client, claude, ns, data)
        cpu, rcpu = cpu_s(proc.pid) - cpu0, redis_cpu_s(client) - rcpu0
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


def redis_cpu_s(client: redis.Redis) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


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
        cpu0 = cpu_s(proc.pid)
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
        cpu = cpu_s(proc.pid) - cpu0
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
        # The collector's CPU per line at this live rate (one line per wake-up), from /proc.
        "cpu_us_per_line": round(cpu / len(written) * 1e6, 1),
        "watchfiles_wakeup_p50_ms": round(pct(wake_lat, 0.50), 2) if wake_lat else None,
        "watchfiles_wakeup_p99_ms": round(pct(wake_lat, 0.99), 2) if wake_lat else None,
    }
