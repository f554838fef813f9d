"""What ``RELAYBUS_REDIS_WAIT_REPLICAS`` costs: collector throughput and latency, WAIT 0 vs 1.

A primary with one replica on loopback and a real ``python -m relaybus.collector`` per
setting:

* throughput — ``--lines`` fixture lines dropped into a transcript at once; lines/s until the
  file's offset is committed (the collector waits for the replica after every batch);
* latency — one line every 10 ms for ``--latency-s`` seconds; time from ``write()`` to the
  event being readable on the replica (XREAD BLOCK there), p50/p99.

Writes ``bench/results/replication.json``. Usage: ``python bench/replication_bench.py``.
"""

from __future__ import annotations

import argparse
import os
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
sys.path.insert(0, str(REPO / "bench"))

from rig.collector import drop_transcript, fixture_lines  # noqa: E402
from rig.services import header, write_result  # noqa: E402
from rig.stats import summary  # noqa: E402

from relaybus.shared.store.keys import Keys  # noqa: E402
from tests.support.collector_proc import CollectorProc  # noqa: E402
from tests.support.collector_records import Entries, transcript, user_line  # noqa: E402
from tests.support.servers import RedisServer, server_binaries  # noqa: E402

OUT = REPO / "bench" / "results" / "replication.json"


def collector(primary: RedisServer, claude: Path, ns: str, wait: int) -> CollectorProc:
    (claude / "projects").mkdir(parents=True)
    (claude / "sessions").mkdir()
    env = {"RELAYBUS_REDIS_WAIT_REPLICAS": str(wait), "RELAYBUS_REDIS_WAIT_TIMEOUT_MS": "5000"}
    return CollectorProc(
        redis_url=primary.url, namespace=ns, claude_dir=claude, host_id="bench", env=env
    ).start()


def throughput(primary: RedisServer, claude: Path, lines: list[bytes], wait: int) -> float:
    ns = f"tp{wait}{time.monotonic_ns()}"
    proc = collector(primary, claude, ns, wait)
    client = primary.client()
    try:
        return len(lines) / drop_transcript(client, claude, ns, b"".join(lines))
    finally:
        proc.stop()
        client.close()


def latency(
    primary: RedisServer, replica: RedisServer, claude: Path, wait: int, seconds: float
) -> dict[str, Any]:
    ns = f"lat{wait}{time.monotonic_ns()}"
    proc = collector(primary, claude, ns, wait)
    reader = redis.Redis(port=replica.port, socket_timeout=10)
    sid = "bench-latency"
    path = transcript(claude, sid)
    written: dict[str, float] = {}
    received: dict[str, float] = {}
    done = threading.Event()

    def read_replica() -> None:
        cursor = "0-0"
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
                    blocks = frame.get("event", {}).get("blocks") or []
                    if blocks and str(blocks[0].get("text", "")).startswith("lat-"):
                        received[blocks[0]["text"]] = now

    t = threading.Thread(target=read_replica)
    t.start()
    try:
        path.write_bytes(user_line(sid, "warm-up"))
        time.sleep(1.0)
        n = int(seconds * 100)
        start = time.perf_counter()
        with open(path, "ab", buffering=0) as f:
            for i in range(n):
                delay = start + i * 0.01 - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)
                written[f"lat-{i}"] = time.perf_counter()
                f.write(user_line(sid, f"lat-{i}"))
        deadline = time.monotonic() + 30
        while len(received) < n and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        done.set()
        t.join(10)
        proc.stop()
        reader.close()
    return summary([(received[k] - written[k]) * 1000 for k in written if k in received])


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--lines", type=int, default=20_000)
    ap.add_argument("--latency-s", type=float, default=10.0)
    ap.add_argument("--repeat", type=int, default=2, help="throughput runs; the best is kept")
    args = ap.parse_args()
    binary = server_binaries()["redis"]
    base = fixture_lines()
    lines = (base * (args.lines // len(base) + 1))[: args.lines]
    result = header("replication", "redis", load=True)
    with tempfile.TemporaryDirectory(prefix="replication-bench-") as tmp:
        root = Path(tmp)
        primary = RedisServer("redis", binary, root / "primary")
        replica = RedisServer("redis", binary, root / "replica")
        primary.start()
        replica.start()
        try:
            with replica.client() as c:
                c.replicaof("127.0.0.1", primary.port)
            while True:
                with replica.client() as c:
                    if c.info("replication").get("master_link_status") == "up":
                        break
                time.sleep(0.05)
            for wait in (0, 1):
                runs = [
                    throughput(primary, root / f"tp{wait}-{i}", lines, wait)
                    for i in range(args.repeat)
                ]
                result[f"wait_{wait}"] = {
                    "throughput_lines_per_s": round(max(runs)),
                    "all_runs_lines_per_s": [round(r) for r in runs],
                    "latency_write_to_replica_100_lines_per_s": latency(
                        primary, replica, root / f"lat{wait}", wait, args.latency_s
                    ),
                }
        finally:
            replica.stop()
            primary.stop()
    result["lines"] = args.lines
    result["load_average_1m_at_end"] = round(os.getloadavg()[0], 2)
    write_result(OUT, result)


if __name__ == "__main__":
    main()
