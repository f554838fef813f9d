"""Projection throughput over every fixture line, and the cost of encoding what it publishes.

Run: ``.venv/bin/python bench/projection_bench.py [--seconds 3]``; writes
``bench/results/projection.json``. Figures: lines/s and µs/line for ``project_line`` alone
and for ``project_line`` + ``orjson.dumps(event)`` (what the collector does per line), the
median per record type, and a bare ``orjson.loads`` baseline over the same lines.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from shared.projection import project_line

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


def _per_type(lines: list[bytes]) -> dict[str, dict[str, float]]:
    """Median µs per line by record type (publish or drop), over 20 passes."""
    samples: dict[str, list[float]] = defaultdict(list)
    for _ in range(20):
        for line in lines:
            start = time.perf_counter_ns()
            result = project_line(line)
            elapsed = time.perf_counter_ns() - start
            kind = result.event["type"] if result.event else f"({result.drop_reason})"
            samples[kind].append(elapsed / 1000)
    return {
        kind: {"median_us": round(statistics.median(v), 2), "lines": len(v) // 20}
        for kind, v in sorted(samples.items())
    }


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
        "orjson_loads_only": _rate(lines, orjson.loads, args.seconds),
        "project_line": _rate(lines, project_line, args.seconds),
        "project_line_and_encode": _rate(lines, _project_and_encode, args.seconds),
        "per_type": _per_type(lines),
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps({k: v for k, v in report.items() if k != "per_type"}, indent=2))


if __name__ == "__main__":
    main()
