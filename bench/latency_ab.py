"""Small fan-out latency, collector before and after a change, against the floor, interleaved.

Three stacks up at once on one private Redis: relaybus with the ``--base`` tree's collector
(a ``git archive`` export on its ``PYTHONPATH``), relaybus with the working tree's, and the
bare floor (``bench/compare.py``'s). Round after round, for 1 and 20 clients, each gets
``--lines`` timed lines at 100/s in turn (A B C A B C), so a shared machine's drift hits all
alike; ``--uvloop`` adds the working tree's collector on uvloop. Medians over rounds of each
round's p50/p99 (write → frame at the client) go to ``bench/results/latency_ab.json``.
Usage: ``python bench/latency_ab.py [--rounds 3]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from rig.stacks import Stack, floor_stack, latency_run, relaybus_stack
from rig.trees import UVLOOP_SITE, export

from tests.support.servers import running_server

OUT = Path(__file__).resolve().parent / "results" / "latency_ab.json"


async def run(args: argparse.Namespace) -> dict[str, Any]:
    rows: list[dict[str, Any]] = []
    with (
        tempfile.TemporaryDirectory(prefix="latency-ab-") as t,
        running_server(Path(t) / "srv") as srv,
    ):
        tmp = Path(t)
        commit = export(args.base, tmp / "base")
        stacks: list[Stack] = []
        try:
            base_env = {"PYTHONPATH": str(tmp / "base")}
            stacks.append(await relaybus_stack(srv, tmp, name="base", collector_env=base_env))
            stacks.append(await relaybus_stack(srv, tmp, name="new"))
            if args.uvloop:
                (tmp / "uvsite").mkdir()
                (tmp / "uvsite" / "sitecustomize.py").write_text(UVLOOP_SITE)
                uv_env = {"PYTHONPATH": str(tmp / "uvsite")}
                stacks.append(
                    await relaybus_stack(srv, tmp, name="new+uvloop", collector_env=uv_env)
                )
            stacks.append(await floor_stack(srv, tmp))
            for rnd in range(args.rounds):
                for n in args.clients:
                    for st in stacks:
                        row = await latency_run(st, n, args.lines, 100, 5.0)
                        row |= {"round": rnd, "load_1m": round(os.getloadavg()[0], 2)}
                        rows.append(row)
                        print(json.dumps(row), flush=True)
        finally:
            for st in stacks:
                await st.stop()
    summary: dict[str, Any] = {}
    for n in args.clients:
        floor = _median(rows, "floor", n)
        summary[str(n)] = {
            st: {**m, "p50_over_floor": round(m["p50_ms"] / floor["p50_ms"], 2)}
            for st in {r["system"] for r in rows}
            if (m := _median(rows, st, n))
        }
    return {
        "benchmark": "latency_ab",
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "cpus": os.cpu_count(),
        "server": srv.kind,
        "base": commit,
        "args": {k: v for k, v in vars(args).items()},
        "median_over_rounds_by_clients": summary,
        "rows": rows,
    }


def _median(rows: list[dict[str, Any]], system: str, n: int) -> dict[str, Any]:
    mine = [r for r in rows if r["system"] == system and r["clients"] == n and r["p50_ms"]]
    return {
        "p50_ms": round(statistics.median(r["p50_ms"] for r in mine), 2),
        "p99_ms": round(statistics.median(r["p99_ms"] for r in mine), 2),
        "lost": sum(r["lost"] for r in mine),
        "rounds": len(mine),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", default="main")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--lines", type=int, default=300)
    ap.add_argument("--clients", type=lambda s: [int(x) for x in s.split(",")], default=[1, 20])
    ap.add_argument("--uvloop", action="store_true")
    args = ap.parse_args()
    res = asyncio.run(run(args))
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(res, indent=2) + "\n")
    print(json.dumps(res["median_over_rounds_by_clients"], indent=2))


if __name__ == "__main__":
    main()
