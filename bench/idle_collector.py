"""An idle collector beside many old transcripts: CPU in a quiet window, A/B.

Writes ``--files`` two-line transcripts (a month old) in 40 project folders, starts a real
``python -m relaybus.collector`` of ``--base`` (a git ref, exported) or of the working tree
on a private Redis, waits until it has registered every file (its offsets hash), then reads
its CPU (/proc) over ``--seconds`` with nothing written. Rounds alternate the two builds.
Prints one JSON object per run; ``--out`` also writes them with the medians.
Usage: ``python bench/idle_collector.py [--base main] [--files 2000] [--rounds 2]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from rig.procs import cpu_s
from rig.trees import export

from relaybus.shared.store.keys import Keys
from tests.support.collector_proc import CollectorProc
from tests.support.collector_records import assistant_line, transcript, user_line
from tests.support.servers import RedisServer, running_server

MONTH_S = 30 * 86400
#: How long a collector may take to register every file before the run is abandoned.
SETTLE_S = 120.0


def transcripts(claude: Path, n: int) -> None:
    old = time.time() - MONTH_S
    for i in range(n):
        sid = str(uuid.uuid4())
        path = transcript(claude, sid, project=f"-home-dev-p{i % 40}")
        path.write_bytes(user_line(sid, "hello") + assistant_line(sid, "hi"))
        os.utime(path, (old, old))


def run(
    srv: RedisServer, root: Path, tag: str, env: dict[str, str], files: int, seconds: float
) -> dict[str, Any]:
    claude = root / tag / "claude"
    (claude / "projects").mkdir(parents=True)
    (claude / "sessions").mkdir()
    transcripts(claude, files)
    client = srv.client()
    offsets = Keys(tag).offsets("bench")
    with CollectorProc(
        redis_url=srv.url, namespace=tag, claude_dir=claude, host_id="bench", env=env
    ) as proc:
        deadline = time.monotonic() + SETTLE_S
        while client.hlen(offsets) < files:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{tag}: {client.hlen(offsets)} of {files} files registered")
            time.sleep(0.2)
        time.sleep(3.0)  # the first scan's tail and the first tree check
        before = cpu_s(proc.pid)
        time.sleep(seconds)
        used = cpu_s(proc.pid) - before
    client.close()
    return {
        "files": files,
        "seconds": seconds,
        "cpu_s": round(used, 3),
        "cpu_pct": round(used / seconds * 100, 2),
        "load_1m": round(os.getloadavg()[0], 2),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", default="main")
    ap.add_argument("--files", type=int, default=2000)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="idle-collector-") as tmp:
        root = Path(tmp)
        commit = export(args.base, root / "base")
        variants = {
            f"base {commit}": {"PYTHONPATH": str(root / "base")},
            "new": {"PYTHONPATH": os.environ.get("PYTHONPATH", "")},
        }
        with running_server(root / "srv") as srv:
            for rnd in range(args.rounds):
                for i, (name, env) in enumerate(variants.items()):
                    row = run(srv, root, f"r{rnd}v{i}", env, args.files, args.seconds)
                    rows.append({"variant": name, "round": rnd, **row})
                    print(json.dumps(rows[-1]), flush=True)
    medians = {
        name: statistics.median(r["cpu_s"] for r in rows if r["variant"] == name)
        for name in variants
    }
    print(json.dumps({"median_cpu_s": medians}))
    if args.out:
        bench = f"idle_collector.py --base {args.base} --files {args.files} --rounds {args.rounds}"
        doc = {"benchmark": bench, "median_cpu_s": medians, "rounds": rows}
        args.out.write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
