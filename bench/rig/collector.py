"""A collector bench's input (the fixture transcripts) and its wait for committed offsets."""

from __future__ import annotations

import time
from pathlib import Path

import redis

from relaybus.shared.store.keys import Keys
from rig import REPO
from tests.support.collector_records import transcript

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
