"""Percentiles and the one latency summary every results file uses."""

from __future__ import annotations

from typing import Any


def pct(values: list[float], q: float) -> float:
    """The ``q`` quantile (nearest rank, rounded to 0.01) of ``values``; NaN when empty."""
    if not values:
        return float("nan")
    s = sorted(values)
    return round(s[min(len(s) - 1, int(q * len(s)))], 2)


def summary(ms: list[float]) -> dict[str, Any]:
    """``n``, p50, p99 and max of latencies in ms; the figures are None when ``ms`` is empty."""
    return {
        "n": len(ms),
        "p50_ms": pct(ms, 0.5) if ms else None,
        "p99_ms": pct(ms, 0.99) if ms else None,
        "max_ms": pct(ms, 1.0) if ms else None,
    }
