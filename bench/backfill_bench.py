"""Backfill benchmark: a real collector's first sight of one huge transcript.

For each size (``--sizes-mb``, default 50 200 1000) one main transcript is written from
the fixture lines (``tests/data/claude-jsonl``), repeated with fresh uuids and one session
id. A real ``python -m relaybus.collector`` is started over a claude dir holding only that
file, whose mtime is set

* ``recent`` — now: inside ``backfill_max_age_hours``, its last ``backfill_events`` events
  are published (``_backfill``);
* ``old`` — 48 h ago: registered at its end and listed (``_register`` / ``history.listing``).

Recorded per run: seconds from the process spawn until the file's offset is committed at
its end (the backfill's events and its offset go in one append, so that is the first
publish), peak RSS of the collector (``VmHWM`` of ``/proc/PID/status``), bytes the
process read (``rchar`` of ``/proc/PID/io``), the events published and a digest of the
session's events and listed hash fields (equal digests = the same outcome), and how often
the collector's heartbeat key was found expired meanwhile (its TTL is 15 s: a loop blocked
longer loses it).

With ``--stop-after S`` each size also gets a ``stopped`` run per variant: the collector is
sent SIGTERM ``S`` seconds after its spawn (mid-backfill for a big file) and the seconds it
takes to exit are recorded (a stop abandons the read).

``--repeat N`` makes N rounds of each size and mode (medians in the result). With
``--baseline REF`` each run is also made, interleaved (A, B, A, B …), by the
collector of git ``REF`` (its tree exported to a temporary folder and put first on
``PYTHONPATH``), so before/after come from one run on one box.

Writes ``bench/results/backfill.json``. Usage:
``python bench/backfill_bench.py [--baseline main] [--repeat 2] [--sizes-mb 50 200 1000]``.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, cast

import orjson
import redis
from rig import REPO
from rig.procs import status_kib
from rig.services import header, write_result
from rig.trees import export

from relaybus.shared.store.keys import Keys
from tests.support.collector_proc import CollectorProc
from tests.support.collector_records import fixture_records, in_session, transcript
from tests.support.servers import RedisServer, running_server

OUT = REPO / "bench" / "results" / "backfill.json"
SID = "b0000000-0000-4000-8000-00000000b16f"
MB = 1 << 20
#: Hash fields compared between variants (lastActivity etc. are derived from the same lines).
HASH_FIELDS = ("title", "firstPrompt", "cwd", "entrypoint", "state", "hasContent", "lastActivity")


def write_transcript(path: Path, size: int) -> int:
    """Fixture records, repeated with fresh uuids under :data:`SID`, up to ``size`` bytes."""
    recs = fixture_records()
    written = 0
    with open(path, "wb") as f:
        while written < size:
            for rec in recs:
                data = in_session(rec, SID)
                f.write(data)
                written += len(data)
                if written >= size:
                    break
    return written


def proc_rchar(pid: int) -> int:
    for ln in Path(f"/proc/{pid}/io").read_text().splitlines():
        if ln.startswith("rchar:"):
            return int(ln.split()[1])
    raise KeyError("rchar")


def digest(client: redis.Redis, keys: Keys) -> str:
    h = hashlib.sha256()
    entries = cast(list[tuple[bytes, dict[bytes, bytes]]], client.xrange(keys.session_events(SID)))
    for _id, fields in entries:
        h.update(orjson.dumps(orjson.loads(fields[b"f"])["event"], option=orjson.OPT_SORT_KEYS))
    row = cast(dict[bytes, bytes], client.hgetall(keys.session(SID)))
    for k in HASH_FIELDS:
        h.update(k.encode() + b"=" + row.get(k.encode(), b"-") + b";")
    return h.hexdigest()[:16]


def collector_over(
    srv: RedisServer, root: Path, data: Path, mode: str, src: Path | None
) -> tuple[CollectorProc, Keys, Path, str]:
    """A collector (not started) over a new claude dir holding only ``data``, hard-linked with
    the mode's mtime (the inode is shared: every run sets it). (collector, keys, the link,
    its offsets field)."""
    ns = f"bf{uuid.uuid4().hex[:8]}"
    claude = root / ns
    (claude / "sessions").mkdir(parents=True)
    path = transcript(claude, SID)
    os.link(data, path)
    mtime = time.time() - (0 if mode == "recent" else 48 * 3600)
    os.utime(path, (mtime, mtime))
    env = {"RELAYBUS_BACKFILL_MAX_AGE_HOURS": "24", "RELAYBUS_BACKFILL_EVENTS": "200"}
    if src is not None:
        env["PYTHONPATH"] = str(src)
    proc = CollectorProc(
        redis_url=srv.url, namespace=ns, claude_dir=claude, host_id="bench", env=env
    )
    return proc, Keys(ns), path, path.relative_to(claude).as_posix()


def run_once(
    srv: RedisServer, root: Path, data: Path, end: int, mode: str, variant: str, src: Path | None
) -> dict[str, Any]:
    """One collector over a claude dir holding only ``data`` (hard-linked), until committed."""
    proc, keys, path, field = collector_over(srv, root, data, mode, src)
    client = srv.client()
    t0 = time.perf_counter()
    proc.start(wait_ready_s=0)
    try:
        deadline = t0 + 600
        beat_seen, beat_missing = False, 0
        while True:
            v = client.hget(keys.offsets("bench"), field)
            if isinstance(v, bytes) and int(v.split(b":")[0]) >= end:
                break
            beating = bool(client.exists(keys.host("bench")))
            beat_seen = beat_seen or beating
            beat_missing += beat_seen and not beating
            if time.perf_counter() > deadline or proc.proc is None or proc.proc.poll() is not None:
                raise RuntimeError(f"{variant} {mode}: offset not committed (log {proc.log_path})")
            time.sleep(0.01)
        seconds = time.perf_counter() - t0
        hwm = status_kib(proc.pid, "VmHWM")
        rchar = proc_rchar(proc.pid)
        events = int(client.xlen(keys.session_events(SID)))
        total = int(client.get(keys.seq) or 0)
        dig = digest(client, keys)
    finally:
        proc.stop()
        client.close()
        path.unlink()
    return {
        "variant": variant,
        "mode": mode,
        "seconds_to_commit": round(seconds, 3),
        "peak_rss_mib": round(hwm / 1024, 1),
        "read_mib": round(rchar / MB, 1),
        # polls (10 ms apart) that found the heartbeat key expired after it first appeared
        "heartbeat_missing_polls": beat_missing,
        "session_events": events,
        "log_entries": total,
        "digest": dig,
    }


def run_stop(
    srv: RedisServer,
    root: Path,
    data: Path,
    end: int,
    after_s: float,
    variant: str,
    src: Path | None,
) -> dict[str, Any]:
    """One collector over ``data`` (recent), sent SIGTERM ``after_s`` after its spawn."""
    proc, keys, path, field = collector_over(srv, root, data, "recent", src)
    proc.start(wait_ready_s=0)
    try:
        time.sleep(after_s)
        client = srv.client()
        value = client.hget(keys.offsets("bench"), field)
        client.close()
        committed = isinstance(value, bytes) and int(value.split(b":")[0]) >= end
        t0 = time.perf_counter()
        rc = proc.terminate(timeout_s=600)
        seconds = time.perf_counter() - t0
    finally:
        proc.stop()
        path.unlink()
    return {
        "variant": variant,
        "mode": "stopped",
        "stop_after_s": after_s,
        "backfill_done_before_stop": committed,
        "seconds_to_exit": round(seconds, 3),
        "exit_code": rc,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes-mb", type=int, nargs="+", default=[50, 200, 1000])
    ap.add_argument("--baseline", default=None, help="git ref to compare with (interleaved)")
    ap.add_argument("--repeat", type=int, default=1, help="rounds of each size and mode")
    ap.add_argument(
        "--stop-after", type=float, default=None, help="also time a SIGTERM this long in"
    )
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    result = header("backfill", "", load=True)  # the server's kind once it runs
    result["settings"] = {"backfill_events": 200, "backfill_max_age_hours": 24, "old_mtime_h": 48}
    result["baseline_ref"] = args.baseline
    head = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    result["current_ref"] = head
    runs: list[dict[str, Any]] = []
    stops: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        variants: list[tuple[str, Path | None]] = []
        if args.baseline:
            export(args.baseline, root / "baseline-src")
            variants.append(("baseline", root / "baseline-src"))
        variants.append(("current", None))
        with running_server(root / "srv") as srv:
            result["server"] = srv.kind
            for size_mb in args.sizes_mb:
                data = root / f"data-{size_mb}.jsonl"
                end = write_transcript(data, size_mb * MB)
                for mode in ("recent", "old"):
                    for round_ in range(args.repeat):
                        for variant, src in variants:
                            r = run_once(srv, root, data, end, mode, variant, src)
                            r.update(size_mib=round(end / MB, 1), round=round_)
                            print(orjson.dumps(r).decode(), flush=True)
                            runs.append(r)
                for round_ in range(args.repeat if args.stop_after is not None else 0):
                    for variant, src in variants:
                        assert args.stop_after is not None
                        r = run_stop(srv, root, data, end, args.stop_after, variant, src)
                        r.update(size_mib=round(end / MB, 1), round=round_)
                        print(orjson.dumps(r).decode(), flush=True)
                        stops.append(r)
                data.unlink()
    result["runs"] = runs
    if stops:
        result["stops"] = stops
    result["median_seconds_to_commit"] = {
        f"{v}/{size}/{mode}": statistics.median(
            r["seconds_to_commit"]
            for r in runs
            if (r["variant"], r["size_mib"], r["mode"]) == (v, size, mode)
        )
        for v, size, mode in sorted({(r["variant"], r["size_mib"], r["mode"]) for r in runs})
    }
    if args.baseline:
        result["same_outcome"] = all(
            a["digest"] == b["digest"]
            for a in runs
            if a["variant"] == "baseline"
            for b in runs
            if b["variant"] == "current"
            and (b["size_mib"], b["mode"]) == (a["size_mib"], a["mode"])
        )
    result["note"] = (
        "seconds_to_commit counts from the process spawn (interpreter start included); "
        "the transcript is in the page cache (just written); read_mib is rchar (all reads "
        "of the process, its imports included)"
    )
    write_result(args.out, result)


if __name__ == "__main__":
    main()
