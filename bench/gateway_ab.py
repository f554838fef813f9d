"""Two gateway builds side by side on one collector and one Redis: 1,000-client latency and
the reconnect storm, interleaved A B A B so that drift on a shared machine hits both alike.

``--before DIR`` is a source tree of the other build (``git archive <commit> | tar -x -C
DIR``); its gateway runs from there, the one of this tree as ``after``. Both gateways are
up for the whole run on the same namespace (the idle one only reads the log). Workloads are
``bench/compare.py``'s (``bench/rig/stacks.py``): (a) latency at 100 lines/s with
``--clients`` watchers, (c) all clients drop, ``--storm-lines`` lines are written, all resume at once,
(d) ``memory``: RSS growth per idle watcher (``--clients`` of them). Latency rows also
carry the gateway's own end-to-end histogram over the run (where the delay accrues) and
the clients' CPU; storm rows the gateway's CPU. Writes ``bench/results/gateway_ab.json``
(``--out``).

    python bench/gateway_ab.py --before /tmp/before --rounds 2
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import math
import os
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

from rig.procs import cpu_s
from rig.stacks import FULL, Stack, idle_rss, latency_run, published_session, storm

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.support.collector_proc import CollectorProc  # noqa: E402
from tests.support.gateway_server import GatewayProc  # noqa: E402
from tests.support.procs import http_ok  # noqa: E402
from tests.support.servers import RedisServer, running_server  # noqa: E402

OUT = REPO / "bench" / "results" / "gateway_ab.json"
TOKEN = "bench"


class TreeGateway(GatewayProc):
    """``python -m relaybus.gateway`` run from another source tree (``-m`` puts cwd first)."""

    def __init__(self, tree: Path, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.tree = tree

    def start(self, timeout_s: float = 30.0) -> TreeGateway:
        self.spawn([sys.executable, "-m", "relaybus.gateway"], cwd=self.tree, env=self.env)
        self.wait_until(lambda: http_ok(f"{self.http}/readyz"), timeout_s)
        return self


async def e2e_buckets(st: Stack) -> dict[float, float]:
    """The gateway's ``e2e_latency_seconds`` histogram (collector stamp -> end of the
    event's fan-out in the gateway): cumulative count per upper bound."""
    url = st.url.replace("ws://", "http://").removesuffix("/ws") + "/metrics"
    text = await asyncio.to_thread(lambda: urllib.request.urlopen(url, timeout=10).read())
    out: dict[float, float] = {}
    for line in text.decode().splitlines():
        if line.startswith("relaybus_gateway_e2e_latency_seconds_bucket{"):
            le = line.split('le="', 1)[1].split('"', 1)[0]
            out[float(le)] = float(line.rsplit(" ", 1)[1])
    return out


def bucket_quantiles(before: dict[float, float], after: dict[float, float]) -> dict[str, Any]:
    """p50 / p99 of the samples between two scrapes, as the bucket bounds they fall under
    (ms): what the gateway itself adds, whatever the clients' backlog. Past the top bound
    it is the string ``"+Inf"`` (JSON has no infinity)."""
    bounds = sorted(after)
    counts = [after[b] - before.get(b, 0.0) for b in bounds]
    total = counts[-1] if counts else 0.0
    res: dict[str, Any] = {"samples": int(total)}
    for name, q in (("p50_le", 0.5), ("p99_le", 0.99)):
        hit = next((b for b, c in zip(bounds, counts, strict=True) if c >= q * total), None)
        if hit is None or not total:
            res[name] = None
        else:
            res[name] = "+Inf" if math.isinf(hit) else round(hit * 1000, 1)
    return res


async def stacks(
    srv: RedisServer, tmp: Path, trees: dict[str, Path], logs: Path | None
) -> tuple[list[Stack], CollectorProc]:
    """One gateway per tree, and the one collector that feeds them all."""
    ns = f"ab{uuid.uuid4().hex[:6]}"
    claude = tmp / "claude"
    (claude / "projects").mkdir(parents=True)
    (claude / "sessions").mkdir()
    col = CollectorProc(
        redis_url=srv.url, namespace=ns, claude_dir=claude, env={"RELAYBUS_BACKFILL_EVENTS": "10"}
    )
    col.start()
    out = []
    for name, tree in trees.items():
        gw = TreeGateway(
            tree,
            redis_url=srv.url,
            namespace=ns,
            tokens=TOKEN,
            env={"RELAYBUS_RATE_LIMIT_PER_S": "100000"},
            log_path=logs / f"gateway-{name}.log" if logs else None,
        ).start()
        assert gw.proc is not None

        async def new_target() -> tuple[str, Path]:
            return await published_session(srv.url, ns, claude)

        async def stop(gw: TreeGateway = gw) -> None:
            gw.kill()

        procs = {"gateway": gw.proc.pid}
        out.append(Stack(name, "relaybus", gw.ws, gw.proc.pid, new_target, stop, procs))
    return out, col


async def run(args: argparse.Namespace) -> dict[str, Any]:
    trees = {"before": args.before.resolve(), "after": REPO}
    plan = dataclasses.replace(
        FULL, storm_clients=args.clients, storm_lines=args.storm_lines, grace_s=15.0
    )
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory() as t, running_server(Path(t) / "srv") as srv:
        tmp = Path(t)
        res: dict[str, Any] = {
            "benchmark": "gateway_ab",
            "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "machine": {"cpus": os.cpu_count(), "load_1m_at_start": round(os.getloadavg()[0], 2)},
            "server": srv.kind,
            "clients": args.clients,
            "latency_lines": args.lines,
            "storm_lines": args.storm_lines,
            "latency": [],
            "storm": [],
            "memory": [],
        }
        gateways, collector = await stacks(srv, tmp, trees, args.logs)
        try:
            for rnd in range(args.rounds):
                for st in gateways if rnd % 2 == 0 else gateways[::-1]:
                    if "memory" in args.only:
                        res["memory"].append({"round": rnd, **await idle_rss(st, args.clients)})
                        print(json.dumps(res["memory"][-1]), flush=True)
                    if "latency" in args.only:
                        before = await e2e_buckets(st)
                        row = await latency_run(st, args.clients, args.lines, 100, 15.0)
                        row["gateway_e2e_ms"] = bucket_quantiles(before, await e2e_buckets(st))
                        res["latency"].append({"round": rnd, **row})
                        print(json.dumps(res["latency"][-1]), flush=True)
                    if "storm" in args.only:
                        cpu0 = cpu_s(st.pid)
                        row = (await storm([st], plan))[0]
                        row["server_cpu_s"] = round(cpu_s(st.pid) - cpu0, 2)
                        res["storm"].append({"round": rnd, **row})
                        print(json.dumps(res["storm"][-1]), flush=True)
        finally:
            for st in gateways:
                await st.stop()
            collector.stop()
    res["seconds"] = round(time.monotonic() - t0)
    res["machine"]["load_1m_at_end"] = round(os.getloadavg()[0], 2)
    return res


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--before", type=Path, required=True, help="source tree of the other build")
    p.add_argument("--clients", type=int, default=1000)
    p.add_argument("--lines", type=int, default=600, help="latency lines per run (100/s)")
    p.add_argument("--storm-lines", type=int, default=1000)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--only", default="latency,storm", help="of latency,storm,memory")
    p.add_argument("--out", type=Path, default=OUT)
    p.add_argument("--logs", type=Path, help="a directory for the gateways' logs")
    args = p.parse_args()
    res = asyncio.run(run(args))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(res, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
