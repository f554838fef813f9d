"""relaybus against python-socketio and two floors, side by side, in one bounded run.

Four systems on one machine, one private Redis, the same ~2 KB transcript lines (a user
line whose text is ``lat <time_ns> <index>`` followed by assistant prose from the test
fixtures), the same minimal client for all (``compare_workers.py``), runs interleaved
A B C D A B C D so that drift on a shared machine hits all of them alike:

* ``relaybus`` — ``python -m collector`` + ``python -m gateway`` (clients watch a session);
* ``socketio`` — python-socketio ``AsyncServer`` + ``AsyncRedisManager`` on uvicorn, fed by
  a watchfiles tailer (1 ms step) emitting through a write-only ``AsyncRedisManager``;
* ``floor`` — the bare hops: watchfiles -> XADD -> XREAD -> ``websockets.broadcast``;
* ``lean`` — the lean floor (``rig/lean_floor.py``): inotify -> read -> pipelined XADD ->
  XREAD BLOCK -> one pre-built frame written to every socket's transport. The reference;
* ``lean-full`` — the lean floor with each line twice in its frame: the bytes of relaybus's
  full frame (record and projection, ~2x the line; the ``relaybus-phone`` frame is ~1x).

Workloads: (a) latency at 100 lines/s by client count, with the CPU µs per delivery of
each server process (``/proc/<pid>/stat``); (q) quiet CPU: one client, 10 s, no lines; (b) the highest rate into 100
clients with p99 <= 250 ms and nothing lost; (c) a reconnect storm; (d) memory per idle
connection; (e) relaybus gateways behind the shipped nginx, throughput against their number.

Writes ``bench/results/compare.json`` and the generated part of ``docs/performance.md``
(table and ``docs/performance-compare.png``). ``--quick`` is a ~2 minute smoke of the
same; the default run is bounded to ~15 minutes. ``--render`` only redraws the doc.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis
from rig.procs import cpu_s
from rig.stacks import (
    FILLER,
    FULL,
    PLACE,
    QUICK,
    TOKEN,
    CWorker,
    Plan,
    Stack,
    client_args,
    counted,
    floor_stack,
    idle_rss,
    latency_run,
    lean_full_stack,
    lean_stack,
    phone_stack,
    quiet,
    relaybus_stack,
    socketio_stack,
    storm,
)

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from relaybus.shared.store.keys import Keys  # noqa: E402
from tests.support.collector_records import user_line  # noqa: E402
from tests.support.gateway_publish import Publisher  # noqa: E402
from tests.support.gateway_server import GatewayProc  # noqa: E402
from tests.support.servers import RedisServer, free_port, running_server  # noqa: E402

OUT = REPO / "bench" / "results" / "compare.json"
DOC = REPO / "docs" / "performance.md"
PLOT = REPO / "docs" / "performance-compare.png"
SYSTEMS = ("relaybus", "relaybus-phone", "socketio", "floor", "lean", "lean-full")
QUIET_S = 10.0
BEGIN, END = "<!-- compare:begin -->", "<!-- compare:end -->"


async def latency(stacks: list[Stack], plan: Plan, rounds: int) -> list[dict[str, Any]]:
    """Each client count, the systems interleaved; ``rounds`` > 1 repeats the whole
    sequence in alternating order (A B C D, D C B A, ...) and the table shows the median."""
    rows = []
    for rnd in range(rounds):
        for n in plan.latency_clients:
            for st in stacks if rnd % 2 == 0 else stacks[::-1]:
                row = await latency_run(st, n, plan.latency_lines, 100, plan.grace_s)
                rows.append({"round": rnd, **row})
                print(json.dumps(rows[-1]), flush=True)
    return rows


async def quiet_cpu(stacks: list[Stack]) -> list[dict[str, Any]]:
    rows = []
    for st in stacks:
        rows.append(await quiet(st, QUIET_S))
        print(json.dumps(rows[-1]), flush=True)
    return rows


async def ladder(stacks: list[Stack], plan: Plan) -> dict[str, Any]:
    """Rates up the ladder into 100 clients until p99 > 250 ms or a line is missing."""
    rows: list[dict[str, Any]] = []
    best: dict[str, int | None] = {st.name: None for st in stacks}
    failed: set[str] = set()
    for rate in plan.ladder:
        for st in stacks:
            if st.name in failed:
                continue
            lines = int(rate * plan.ladder_s)
            row = await latency_run(st, 100, lines, rate, 5.0)
            row["ok"] = row["lost"] == 0 and row["p99_ms"] is not None and row["p99_ms"] <= 250
            rows.append(row)
            print(json.dumps(row), flush=True)
            if row["ok"]:
                best[st.name] = rate
            else:
                failed.add(st.name)
    return {
        "clients": 100,
        "step_s": plan.ladder_s,
        "rates": list(plan.ladder),
        "max_sustained_lines_per_s": best,
        "rows": rows,
    }


async def idle_memory(stacks: list[Stack], plan: Plan) -> list[dict[str, Any]]:
    rows = []
    for st in stacks:
        rows.append(await idle_rss(st, plan.idle_clients))
        print(json.dumps(rows[-1]), flush=True)
    return rows


NGINX_TEMPS = ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")


def nginx_conf(root: Path, port: int, upstreams: list[int]) -> Path:
    """The shipped deploy/nginx.conf on loopback: local upstreams, paths under ``root``, and
    ``limit_conn`` lifted (every bench client comes from 127.0.0.1; 64 would refuse them)."""
    text = (REPO / "deploy" / "nginx.conf").read_text()
    text = text.replace(
        "server gateway:8080 max_fails=1 fail_timeout=5s;",
        " ".join(f"server 127.0.0.1:{p} max_fails=1 fail_timeout=5s;" for p in upstreams),
    )
    text = text.replace("listen 8080;", f"listen 127.0.0.1:{port};")
    text = text.replace("limit_conn per_address 64;", "")
    text = text.replace("access_log /dev/stdout relaybus;", "access_log off;")
    text = text.replace(
        "error_log /dev/stderr warn;", f"error_log {root}/error.log warn;\npid {root}/nginx.pid;"
    )
    temps = "".join(f"    {t}_temp_path {root}/{t};\n" for t in NGINX_TEMPS)
    text = text.replace("http {\n", "http {\n" + temps, 1)
    conf = root / "nginx.conf"
    conf.write_text(text)
    return conf


async def behind_nginx(srv: RedisServer, tmp: Path, plan: Plan) -> dict[str, Any]:
    """N relaybus gateways behind nginx; deliveries/s at an offered load beyond one gateway."""
    nginx = shutil.which("nginx")
    if nginx is None:
        return {"skipped": "nginx not installed"}
    rows = []
    rate = plan.nginx_rate
    for n in plan.nginx_gateways:
        ns = f"ngx{uuid.uuid4().hex[:6]}"
        client = aioredis.Redis.from_url(srv.url)
        pub = Publisher(client, Keys(ns))
        await pub.start_session("s1")
        gws = [GatewayProc(redis_url=srv.url, namespace=ns, tokens=TOKEN) for _ in range(n)]
        root = tmp / f"nginx{n}"
        root.mkdir()
        port = free_port()
        conf = nginx_conf(root, port, [g.port for g in gws])
        proc = None
        try:
            for g in gws:
                g.start()
            proc = await asyncio.create_subprocess_exec(
                nginx,
                "-p",
                str(root),
                "-c",
                str(conf),
                "-g",
                "daemon off;",
                stderr=asyncio.subprocess.DEVNULL,
            )
            await asyncio.sleep(0.5)
            events = int(rate * plan.nginx_s)
            w = await CWorker(
                "clients",
                *client_args("relaybus", f"ws://127.0.0.1:{port}/ws", "s1", plan.nginx_clients),
                "--count",
                str(events),
                "--max-s",
                str(plan.nginx_s + plan.grace_s),
            ).start(300)
            cpu0 = sum(cpu_s(g.proc.pid) for g in gws if g.proc is not None)
            start = time.monotonic()
            for i in range(events):
                delay = start + i / rate - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                await pub.events("s1", [f"lat {time.time_ns()} {i:06d} {FILLER}"])
            sent_s = time.monotonic() - start
            res = await w.result(plan.nginx_s + plan.grace_s + 60)
            cpu = sum(cpu_s(g.proc.pid) for g in gws if g.proc is not None) - cpu0
        finally:
            if proc is not None:
                proc.terminate()
                await proc.wait()
            for g in gws:
                g.kill()
            await client.aclose()
        lat = res["latencies_ms"]
        rows.append(
            {
                "gateways": n,
                "clients": plan.nginx_clients,
                "events_per_s": rate,
                "deliveries_per_s": round(len(lat) / max(sent_s, max(lat, default=0) / 1000)),
                "gateways_cpu_s": round(cpu, 2),
                **counted(lat, plan.nginx_clients * events),
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    return {
        "note": "shipped deploy/nginx.conf, limit_conn lifted (all clients share 127.0.0.1)",
        "rows": rows,
    }


async def run(plan: Plan, only: set[str], systems: set[str], rounds: int = 1) -> dict[str, Any]:
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory() as t, running_server(Path(t) / "srv") as srv:
        tmp = Path(t)
        out: dict[str, Any] = {
            "benchmark": "compare",
            "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "machine": {
                "cpus": os.cpu_count(),
                "python": sys.version.split()[0],
                "load_1m_at_start": round(os.getloadavg()[0], 2),
            },
            "server": srv.kind,
            "plan": plan.__dict__,
            "line_bytes": len(user_line(str(uuid.uuid4()), f"{PLACE.decode()} {FILLER}")),
        }
        stacks: list[Stack] = []
        try:
            if only & {"latency", "ladder", "storm", "memory", "quiet"}:
                makers = {
                    "relaybus": relaybus_stack,
                    "socketio": socketio_stack,
                    "floor": floor_stack,
                    "lean": lean_stack,
                    "lean-full": lean_full_stack,
                }
                for name, make in makers.items():
                    if name in systems:
                        stacks.append(await make(srv, tmp))
                if "relaybus-phone" in systems:  # beside relaybus, on its processes if it runs
                    stacks.insert(int("relaybus" in systems), await phone_stack(stacks, srv, tmp))
            if "memory" in only:  # first: the servers' heaps have not grown yet
                out["idle_memory"] = await idle_memory(stacks, plan)
            if "quiet" in only:
                out["quiet"] = await quiet_cpu(stacks)
            if "latency" in only:
                out["latency"] = await latency(stacks, plan, rounds)
            if "ladder" in only:
                out["ladder"] = await ladder(stacks, plan)
            if "storm" in only:
                out["storm"] = await storm(stacks, plan)
            for st in stacks:
                await st.stop()
            stacks = []
            if "nginx" in only:
                out["nginx"] = await behind_nginx(srv, tmp, plan)
        finally:
            for st in stacks:
                await st.stop()
    out["seconds"] = round(time.monotonic() - t0)
    out["machine"]["load_1m_at_end"] = round(os.getloadavg()[0], 2)
    return out


def fmt(v: Any) -> str:
    if v is None:
        return "—"
    if isinstance(v, float):
        return f"{v:,.1f}" if v < 100 else f"{v:,.0f}"
    return f"{v:,}" if isinstance(v, int) else str(v)


def render(res: dict[str, Any]) -> str:
    """The generated Markdown: one table per workload (and the plot's link)."""
    m = res["machine"]
    out = [
        f"Run {res['when']}, {res['seconds']} s, {m['cpus']} CPUs, load {m['load_1m_at_start']}"
        f" → {m['load_1m_at_end']}, {res['server']}, lines of {res['line_bytes']} bytes, "
        f"plan: `{json.dumps(res['plan'])}`.",
        "",
    ]
    systems = [s for s in SYSTEMS if any(r["system"] == s for r in res.get("latency", []))]
    if "latency" in res:
        out += latency_tables(res["latency"], systems)
    if "quiet" in res:
        out += [
            f"### (q) Quiet CPU: one client, {QUIET_S:.0f} s, no lines (CPU s per process)",
            "",
            "| system | total | per process |",
            "| --- | ---: | --- |",
        ]
        out += [
            f"| {r['system']} | {r['total_cpu_s']:.2f} | "
            + ", ".join(f"{k} {v:.2f}" for k, v in r["cpu_s"].items())
            + " |"
            for r in res["quiet"]
        ]
        out.append("")
    if "ladder" in res:
        lad = res["ladder"]
        best = lad["max_sustained_lines_per_s"]
        out += [
            f"### (b) Highest sustained rate into {lad['clients']} clients "
            f"(p99 ≤ 250 ms, nothing lost; {lad['step_s']} s per step)",
            "",
            "| rate | " + " | ".join(SYSTEMS) + " |",
            "| ---: |" + " ---: |" * len(SYSTEMS),
        ]
        for rate in lad["rates"]:
            cells = []
            for s in SYSTEMS:
                r = next(
                    (x for x in lad["rows"] if x["system"] == s and x["lines_per_s"] == rate), None
                )
                cells.append(
                    "not run"
                    if r is None
                    else f"{fmt(r['p99_ms'])} ms, lost {fmt(r['lost'])}{'' if r['ok'] else ' ✗'}"
                )
            out.append(f"| {rate:,}/s | " + " | ".join(cells) + " |")
        out += ["| **max** | " + " | ".join(f"**{fmt(best.get(s))}**" for s in SYSTEMS) + " |", ""]
    if "storm" in res:
        out += [
            "### (c) Reconnect storm",
            "",
            "| system | clients | lines while away | all reconnected (s) | all caught up (s) "
            "| lost | later than 10 s |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
        ]
        for r in res["storm"]:
            out.append(
                f"| {r['system']} | {r['clients']:,} | {r['lines_while_away']:,} | "
                f"{fmt(r['all_reconnected_s'])} | {fmt(r['all_caught_up_s'])} | "
                f"{r['lost']:,} of {r['expected']:,} | {r['late_over_10s']:,} |"
            )
        out.append("")
    if "idle_memory" in res:
        out += [
            "### (d) Memory per idle connection (server RSS growth)",
            "",
            "| system | idle clients | KiB per connection |",
            "| --- | ---: | ---: |",
        ]
        out += [
            f"| {r['system']} | {r['idle_clients']:,} | {fmt(r['kib_per_connection'])} |"
            for r in res["idle_memory"]
        ]
        out.append("")
    if "nginx" in res and "rows" in res["nginx"]:
        out += [
            "### (e) relaybus gateways behind nginx (one machine)",
            "",
            f"{res['nginx']['note']}.",
            "",
            "| gateways | clients | events/s | deliveries/s | p50 / p99 ms | lost | gateways' CPU s |",
            "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        ]
        out += [
            f"| {r['gateways']} | {r['clients']:,} | {fmt(r['events_per_s'])} | "
            f"{r['deliveries_per_s']:,} | {fmt(r['p50_ms'])} / {fmt(r['p99_ms'])} | "
            f"{r['lost']:,} | {fmt(r['gateways_cpu_s'])} |"
            for r in res["nginx"]["rows"]
        ]
        out.append("")
    return "\n".join(out)


def ratio(a: float | None, b: float | None) -> str:
    return "—" if a is None or not b else f"{a / b:.2f}×"


def med(values: list[float]) -> float | None:
    return round(statistics.median(values), 2) if values else None


def merged(rows: list[dict[str, Any]]) -> dict[tuple[int, str], dict[str, Any]]:
    """One row per (clients, system): the median of its rounds' figures, losses summed."""
    groups: dict[tuple[int, str], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["clients"], r["system"]), []).append(r)
    out = {}
    for key, rs in groups.items():
        cpu: dict[str, float | None] = {}
        for role in rs[0].get("cpu_us_per_delivery") or {}:
            vals = [c[role] for r in rs if (c := r.get("cpu_us_per_delivery")) and c.get(role)]
            cpu[role] = med(vals)
        out[key] = {
            "clients": key[0],
            "system": key[1],
            "rounds": len(rs),
            "p50_ms": med([r["p50_ms"] for r in rs if r["p50_ms"] is not None]),
            "p99_ms": med([r["p99_ms"] for r in rs if r["p99_ms"] is not None]),
            "lost": sum(r["lost"] for r in rs),
            "cpu_us_per_delivery": cpu,
        }
    return out


#: The ratios the latency table shows, when both systems ran: (system, reference).
RATIOS = (("relaybus", "lean"), ("relaybus", "lean-full"), ("relaybus-phone", "lean"))


def latency_tables(rows: list[dict[str, Any]], systems: list[str]) -> list[str]:
    """(a): p50 / p99 per system and the ratios to the lean floors; CPU µs per delivery
    (medians over the rounds when there are several)."""
    by = merged(rows)
    counts = sorted({r["clients"] for r in rows})
    ref = "lean" if "lean" in systems else None
    pairs = [(a, b) for a, b in RATIOS if a in systems and b in systems]
    out = [
        "### (a) Latency at 100 lines/s (write → frame received, ms)",
        "",
        *(
            [f"Median of {max(r['rounds'] for r in by.values())} interleaved rounds.", ""]
            if any(r["rounds"] > 1 for r in by.values())
            else []
        ),
        "| clients | "
        + " | ".join(f"{s} p50 / p99" for s in systems)
        + "".join(f" | {a} ÷ {b} p50 / p99" for a, b in pairs)
        + " | lost ("
        + " / ".join(s[0] for s in systems)
        + ") |",
        "| ---: |" + " ---: |" * (len(systems) + 1 + len(pairs)),
    ]
    for n in counts:
        cells = [
            f"{fmt(by[n, s]['p50_ms'])} / {fmt(by[n, s]['p99_ms'])}" if (n, s) in by else "—"
            for s in systems
        ]
        for a, b in pairs:
            if (n, a) in by and (n, b) in by:
                r, f = by[n, a], by[n, b]
                cells.append(
                    f"{ratio(r['p50_ms'], f['p50_ms'])} / {ratio(r['p99_ms'], f['p99_ms'])}"
                )
            else:
                cells.append("—")
        lost = " / ".join(fmt(by[n, s]["lost"]) if (n, s) in by else "—" for s in systems)
        out.append(f"| {n:,} | " + " | ".join(cells) + f" | {lost} |")
    out += [
        "",
        "![latency by clients](performance-compare.png)",
        "",
        "CPU µs per delivery (one line received by one client) of each server process, from "
        "`/proc/<pid>/stat` before and after the writes:",
        "",
        "| clients | "
        + " | ".join(systems)
        + (" | gateway ÷ lean | relaybus total ÷ lean" if ref and "relaybus" in systems else "")
        + " |",
        "| ---: |"
        + " --- |" * len(systems)
        + (" ---: | ---: |" if ref and "relaybus" in systems else ""),
    ]
    for n in counts:
        cells = []
        for s in systems:
            cpu = by[n, s].get("cpu_us_per_delivery") if (n, s) in by else None
            cells.append(
                "—"
                if not cpu
                else ", ".join(f"{k} {fmt(v)}" for k, v in cpu.items() if k != "total")
                + f" (Σ {fmt(cpu['total'])})"
            )
        if ref and "relaybus" in systems:
            rc = by.get((n, "relaybus"), {}).get("cpu_us_per_delivery") or {}
            lc = by.get((n, ref), {}).get("cpu_us_per_delivery") or {}
            cells += [
                ratio(rc.get("gateway"), lc.get(ref)),
                ratio(rc.get("total"), lc.get("total")),
            ]
        out.append(f"| {n:,} | " + " | ".join(cells) + " |")
    out.append("")
    return out


def plot(res: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, key in zip(axes, ("p50_ms", "p99_ms"), strict=True):
        for s in SYSTEMS:
            rows = sorted(
                (r for r in merged(res["latency"]).values() if r["system"] == s and r[key]),
                key=lambda r: int(r["clients"]),
            )
            if not rows:
                continue
            ax.plot([r["clients"] for r in rows], [r[key] for r in rows], marker="o", label=s)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("clients")
        ax.set_ylabel(f"{key.split('_')[0]} latency (ms)")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend()
    fig.suptitle("write → frame received at 100 lines/s")
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def write_doc(res: dict[str, Any], doc: Path) -> None:
    """Put the generated part between the markers of ``doc`` (the prose around it stays)."""
    text = doc.read_text() if doc.exists() else f"# Performance\n\n{BEGIN}\n{END}\n"
    head, rest = text.split(BEGIN, 1)
    tail = rest.split(END, 1)[1]
    doc.write_text(f"{head}{BEGIN}\n{render(res)}\n{END}{tail}")
    if "latency" in res:
        plot(res, doc.parent / PLOT.name)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="a ~2 minute smoke of every workload")
    p.add_argument("--only", default="latency,quiet,ladder,storm,memory,nginx")
    p.add_argument(
        "--systems",
        default="relaybus,socketio,floor,lean",
        help="comma-separated, of "
        + ",".join(SYSTEMS)
        + " (relaybus-phone: relaybus with clients that ask for blocks_only, as its web client does)",
    )
    p.add_argument("--clients", help="latency: comma-separated client counts (default: the plan's)")
    p.add_argument("--lines", type=int, help="latency: lines per point (default: the plan's)")
    p.add_argument("--rounds", type=int, default=1, help="latency: interleaved repetitions")
    p.add_argument("--out", type=Path, default=OUT)
    p.add_argument("--doc", type=Path, default=DOC, help="the Markdown file to update")
    p.add_argument("--no-doc", action="store_true", help="write the JSON only")
    p.add_argument("--render", action="store_true", help="only redraw the doc from --out")
    args = p.parse_args()
    if args.render:
        res = json.loads(args.out.read_text())
    else:
        plan = QUICK if args.quick else FULL
        if args.clients:
            plan = replace(plan, latency_clients=tuple(int(c) for c in args.clients.split(",")))
        if args.lines:
            plan = replace(plan, latency_lines=args.lines)
        res = asyncio.run(
            run(
                plan,
                set(args.only.split(",")),
                set(args.systems.split(",")),
                args.rounds,
            )
        )
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(res, indent=2) + "\n")
        print(f"wrote {args.out}")
    if not args.no_doc:
        write_doc(res, args.doc)
        print(f"wrote {args.doc}")


if __name__ == "__main__":
    main()
