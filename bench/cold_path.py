"""What one line's projection costs hot (lines back to back) and cold (one line every few ms).

At 100 lines/s the collector handles each line after ~10 ms of sleep or of the other
processes' work, with its caches no longer holding its code and data. This measures the
collector's per-line steps both ways in one process, interleaved, on the benches' ~2 KB user
line: ``orjson.loads`` (C, the line's bytes), ``project_line`` (the projection) and
``Projector.plan_batch`` (projection, plan and encoding of the batch's events: what runs
between the read and the append's request). Between two cold samples the process either
sleeps (``sleep``) or spins in a loop that touches no relaybus code (``busy``); a hot
sample runs right after the same step ran untimed. One row of p50s per gap
(``--gaps-ms``, 0.1 to 10 ms by default).

Writes ``bench/results/cold_path.json``.
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import orjson
from prometheus_client import CollectorRegistry
from rig.stacks import FILLER, PLACE

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from relaybus.collector.metrics import CollectorMetrics  # noqa: E402
from relaybus.collector.projector import Projector  # noqa: E402
from relaybus.collector.session_state import SessionState  # noqa: E402
from relaybus.collector.tailer import Line  # noqa: E402
from relaybus.shared.gctune import tune_gc  # noqa: E402
from relaybus.shared.settings import load_settings  # noqa: E402
from relaybus.shared.transcript.projection import project_line  # noqa: E402
from tests.support.collector_records import user_line  # noqa: E402

OUT = REPO / "bench" / "results" / "cold_path.json"


def _spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def _measure(
    steps: dict[str, Callable[[bytes, int], object]],
    line: Callable[[int], bytes],
    gap: float,
    count: int,
) -> dict[str, dict[str, float]]:
    """Each step's p50 µs hot and after ``gap`` s asleep or spinning, the ways interleaved
    (drift hits each alike); prints one row a step."""
    #: What runs just before a timed sample (``hot``: the same step, untimed).
    ways: dict[str, Callable[[Callable[[], object]], object]] = {
        "hot": lambda same: same(),
        "sleep": lambda _same: time.sleep(gap),
        "busy": lambda _same: _spin(gap),
    }
    samples: dict[str, dict[str, list[float]]] = {s: {w: [] for w in ways} for s in steps}
    warm = 30
    for i in range(count + warm):
        for way, between in ways.items():
            for step, run in steps.items():
                raw = line(i)
                between(functools.partial(run, raw, i))
                t0 = time.perf_counter_ns()
                run(raw, i)
                took = (time.perf_counter_ns() - t0) / 1000
                if i >= warm:
                    samples[step][way].append(took)
    p50 = {
        s: {w: round(statistics.median(v), 1) for w, v in ws.items()} for s, ws in samples.items()
    }
    ms = f"{gap * 1000:g} ms"
    for step, ws in p50.items():
        hot = ws["hot"]
        print(
            f"{step:14s} hot {hot:7.1f} µs   after {ms} asleep {ws['sleep']:7.1f}"
            f" ({ws['sleep'] / hot:4.1f}×)   spinning {ws['busy']:7.1f} ({ws['busy'] / hot:4.1f}×)",
            flush=True,
        )
    return p50


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--samples", type=int, default=300, help="per step and way")
    p.add_argument(
        "--gaps-ms", default="0.1,1,3,10", help="comma-separated: between two cold samples"
    )
    p.add_argument("--out", type=Path, default=OUT)
    args = p.parse_args()

    sid = str(uuid.uuid4())
    settings = load_settings(claude_dir="/nonexistent", redis_url="redis://127.0.0.1:1/0")
    projector = Projector(settings, CollectorMetrics(CollectorRegistry()))
    state = SessionState(sid, live=True, started_at=1)
    template = user_line(sid, f"{PLACE.decode()} {FILLER}").rstrip(b"\n")
    tune_gc()  # as the collector does after start-up

    def line(i: int) -> bytes:
        return template.replace(PLACE, b"lat %d %06d" % (time.time_ns(), i), 1)

    steps: dict[str, Callable[[bytes, int], object]] = {
        "orjson.loads": lambda raw, _i: orjson.loads(raw),
        "project_line": lambda raw, _i: project_line(raw),
        "plan_batch": lambda raw, i: projector.plan_batch(
            state, [Line(raw, len(raw), (i + 1) * len(raw))], encode=True
        ),
    }
    gaps = [float(g) for g in args.gaps_ms.split(",")]
    result: dict[str, object] = {
        "benchmark": "cold_path",
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "line_bytes": len(template),
        "samples": args.samples,
        "p50_us": {f"{g:g}": _measure(steps, line, g / 1000, args.samples) for g in gaps},
    }
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
