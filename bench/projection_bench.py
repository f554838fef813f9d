"""Projection throughput over every fixture line, and the cost of encoding what it publishes.

Run: ``.venv/bin/python bench/projection_bench.py [--seconds 3]``; writes
``bench/results/projection.json``. Figures: lines/s and µs/line for ``project_line`` alone
and for ``project_line`` + ``orjson.dumps(event)`` (what the collector does per line), per-line
median/p90/p99, the median per record type, and a bare ``orjson.loads`` baseline over the
same lines. Rates are the best of many rounds (the least disturbed by other processes).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from relaybus.shared.transcript.projection import project_line

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "data" / "claude-jsonl"
RESULTS = ROOT / "bench" / "results" / "projection.json"


def _lines() -> list[bytes]:
    lines: list[bytes] = []
    for path in sorted(FIXTURES.glob("*.jsonl")):
        lines.extend(path.read_bytes().splitlines(keepends=True))
    return lines


def _rate(lines: list[bytes], step: Callable[[bytes], object], seconds: float) -> dict[str, float]:
    """Best-of-rounds lines/s for ``step`` over all lines (the best round has least noise)."""
    rounds: list[float] = []
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline or len(rounds) < 3:
        start = time.perf_counter()
        for line in lines:
            step(line)
        rounds.append(len(lines) / (time.perf_counter() - start))
    best = max(rounds)
    return {
        "lines_per_s": round(best),
        "median_lines_per_s": round(statistics.median(rounds)),
        "us_per_line": round(1e6 / best, 2),
        "rounds": len(rounds),
    }


def _project_and_encode(line: bytes) -> object:
    result = project_line(line)
    return orjson.dumps(result.event) if result.event is not None else None


def _per_line(lines: list[bytes]) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    """Per-line cost in µs: each line's best of 20 passes (robust to other processes on the
    box), then the median/p90/p99 over lines and the median per record type or drop reason."""
    best = [float("inf")] * len(lines)
    for _ in range(20):
        for i, line in enumerate(lines):
            start = time.perf_counter_ns()
            project_line(line)
            best[i] = min(best[i], (time.perf_counter_ns() - start) / 1000)
    samples: dict[str, list[float]] = defaultdict(list)
    for line, cost in zip(lines, best, strict=True):
        result = project_line(line)
        samples[result.event["type"] if result.event else f"({result.drop_reason})"].append(cost)
    cuts = statistics.quantiles(best, n=100)
    overall = {
        "median_us": round(statistics.median(best), 2),
        "p90_us": round(cuts[89], 2),
        "p99_us": round(cuts[98], 2),
        "max_us": round(max(best), 2),
    }
    by_type = {
        kind: {"median_us": round(statistics.median(v), 2), "lines": len(v)}
        for kind, v in sorted(samples.items())
    }
    return overall, by_type


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=3.0, help="time per measurement")
    args = parser.parse_args()
    lines = _lines()
    size = sum(len(line) for line in lines)
    report: dict[str, Any] = {
        "benchmark": "projection",
        "python": platform.python_version(),
        "machine": platform.machine(),
        "lines": len(lines),
        "bytes": size,
        "mean_line_bytes": round(size / len(lines)),
        "cpus": os.cpu_count(),
        "loadavg_1m_at_start": round(os.getloadavg()[0], 2),
        "orjson_loads_only": _rate(lines, orjson.loads, args.seconds),
        "project_line": _rate(lines, project_line, args.seconds),
        "project_line_and_encode": _rate(lines, _project_and_encode, args.seconds),
    }
    report["per_line"], report["per_type"] = _per_line(lines)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps({k: v for k, v in report.items() if k != "per_type"}, indent=2))


if __name__ == "__main__":
    main()
