"""The collector before and after a change, side by side: one run, variants interleaved.

Exports ``--base`` (a git ref, default ``main``) into a temporary tree and runs its
collector against the working tree's, round after round (A B A B ...), so the drift of a
shared machine hits both alike. Each round and variant runs ``bench/rig/collector.py``'s
two measures with a real ``python -m relaybus.collector`` on a private Redis:

* throughput: ``--lines`` fixture lines dropped in at once: lines/s and the collector's
  CPU µs per line;
* latency: one line every 10 ms for ``--latency-s`` s, ``write()`` to readable in the log
  (p50/p99) and the collector's CPU µs per line at that rate, next to a bare watchfiles
  wake-up measured in the same run.

``--uvloop`` adds the working tree on uvloop (installed by a ``sitecustomize`` on
``PYTHONPATH``) as a third variant. Medians over rounds go to
``bench/results/collector_ab.json`` (``--out``). Usage: ``python bench/collector_ab.py [--rounds 3]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from rig import REPO
from rig.collector import fixture_lines, latency, throughput
from rig.trees import UVLOOP_SITE, export

from tests.support.servers import running_server

OUT = REPO / "bench" / "results" / "collector_ab.json"


def median_of(runs: list[dict[str, Any]], *path: str) -> float:
    values = []
    for run in runs:
        v: Any = run
        for k in path:
            v = v[k]
        values.append(float(v))
    return round(statistics.median(values), 2)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", default="main")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--lines", type=int, default=20_000)
    ap.add_argument("--latency-s", type=float, default=5.0)
    ap.add_argument("--uvloop", action="store_true")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    base = fixture_lines()
    lines = (base * (args.lines // len(base) + 1))[: args.lines]
    results: dict[str, list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory(prefix="collector-ab-") as tmp:
        root = Path(tmp)
        old = root / "base"
        commit = export(args.base, old)
        variants: dict[str, dict[str, str]] = {
            f"base {commit}": {"PYTHONPATH": str(old)},
            "new": {},
        }
        if args.uvloop:
            site = root / "uvsite"
            site.mkdir()
            (site / "sitecustomize.py").write_text(UVLOOP_SITE)
            variants["new+uvloop"] = {"PYTHONPATH": str(site)}
        with running_server(root / "srv") as srv:
            for rnd in range(args.rounds):
                for i, (name, env) in enumerate(variants.items()):
                    tag = f"r{rnd}v{i}"
                    tp = throughput(srv, root / f"tp-{tag}", lines, f"tp{tag}", env)
                    claude = root / f"lat-{tag}"
                    (claude / "projects").mkdir(parents=True)
                    (claude / "sessions").mkdir()
                    lat = latency(srv, claude, f"lat{tag}", args.latency_s, env)
                    run = {"throughput": tp, "latency": lat, "load_1m": os.getloadavg()[0]}
                    results.setdefault(name, []).append(run)
                    print(name, rnd, json.dumps(_row(run)), flush=True)
    summary = {
        name: {
            "lines_per_s": median_of(runs, "throughput", "lines_per_s"),
            "collector_cpu_us_per_line": median_of(
                runs, "throughput", "cpu_us_per_line", "collector"
            ),
            "live_cpu_us_per_line": median_of(runs, "latency", "cpu_us_per_line"),
            "latency_p50_ms": median_of(runs, "latency", "p50_ms"),
            "latency_p99_ms": median_of(runs, "latency", "p99_ms"),
            "watchfiles_wakeup_p50_ms": median_of(runs, "latency", "watchfiles_wakeup_p50_ms"),
        }
        for name, runs in results.items()
    }
    result = {
        "benchmark": "collector_ab",
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "cpus": os.cpu_count(),
        "server": srv.kind,
        "args": vars(args),
        "median_over_rounds": summary,
        "rounds": {name: [_row(r) for r in runs] for name, runs in results.items()},
        "note": "variants interleaved round by round on a shared 2-core box; load_1m per run",
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2, default=str) + "\n")
    print(json.dumps(summary, indent=2))


def _row(run: dict[str, Any]) -> dict[str, Any]:
    tp, lat = run["throughput"], run["latency"]
    return {
        "lines_per_s": tp["lines_per_s"],
        "cpu_us_per_line": tp["cpu_us_per_line"]["collector"],
        "live_cpu_us_per_line": lat["cpu_us_per_line"],
        "p50_ms": lat["p50_ms"],
        "p99_ms": lat["p99_ms"],
        "wakeup_p50_ms": lat["watchfiles_wakeup_p50_ms"],
        "load_1m": round(run["load_1m"], 2),
    }


if __name__ == "__main__":
    main()
