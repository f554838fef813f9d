"""The fan-out cost of the per-connection scope filter (issue 25).

Drives ``Hub.dispatch`` in-process (no sockets: a sink that takes every frame) with
``--conns`` live v1 connections and batches of ``--batch`` events spread over ``--sessions``
sessions on two machines, in three modes:

* ``unscoped`` — every connection with a ``RELAYBUS_TOKENS`` token (no filter: today's path);
* ``scoped_all`` — every connection a member whose scope admits every session (the filter
  runs on every offer, nothing is dropped: its pure cost);
* ``scoped_half`` — scopes of one machine each (half the sessions are filtered out).

Reports nanoseconds per offer (one event offered to one connection), the median and the
minimum of ``--rounds`` rounds, and writes ``bench/results/scope.json``. Usage:
``python bench/scope_bench.py``.
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from relaybus.gateway.delivery.connection import Connection  # noqa: E402
from relaybus.gateway.delivery.events import Event  # noqa: E402
from relaybus.gateway.delivery.fanout import Hub  # noqa: E402
from relaybus.gateway.metrics import GatewayMetrics  # noqa: E402
from relaybus.shared.wire import frames as wire_frames  # noqa: E402
from relaybus.shared.wire.scope import Member, Scope  # noqa: E402

HOSTS = ("laptop", "server")


class TakeAll:
    """A sink that accepts every write at once (the fan-out alone is measured)."""

    raw_ok = True

    async def send_many(self, items: Any) -> None:
        return None

    def abort(self) -> None:
        return None

    def write_now(self, items: Any) -> bool:
        return True

    def steady_write(self, changed: Any) -> None:
        return None  # every write goes through write_now: the checked path is measured


def _hub(conns: int, sessions: int, mode: str) -> Hub:
    hub = Hub(GatewayMetrics(CollectorRegistry()))
    for i in range(sessions):
        hub.places.put(f"s{i}", HOSTS[i % 2], f"/srv/p{i}")
    everything = Scope.build(hosts=HOSTS)
    for i in range(conns):
        conn = Connection(
            TakeAll(),
            cid=f"c{i}",
            metrics=hub.metrics,
            queue_max=10**6,
            buffer_max=10**6,
            position=0,
        )
        conn.state.global_buffer = None
        conn.state.welcomed = True
        if mode != "unscoped":
            scope = everything if mode == "scoped_all" else Scope.build(hosts=[HOSTS[i % 2]])
            conn.member = Member(f"m{i}", f"t{i}", scope)
            conn.state.in_scope = hub.places.check(scope)
        hub.add(conn)
    return hub


def _events(start: int, batch: int, sessions: int) -> list[Event]:
    out = []
    for seq in range(start, start + batch):
        sid = f"s{seq % sessions}"  # interleaved: no runs, one offer per event and connection
        frame = wire_frames.session_event(sid, {"type": "user", "blocks": []})
        out.append(Event(seq, sid, wire_frames.SESSION_EVENT, frame, 0))
    return out


def measure(conns: int, sessions: int, batch: int, batches: int, mode: str) -> float:
    """ns per offer of ``batches`` dispatches of ``batch`` events to ``conns`` connections."""
    hub = _hub(conns, sessions, mode)
    work = [_events(1 + b * batch, batch, sessions) for b in range(batches)]
    gc.collect()
    gc.disable()  # a collection inside one mode's round is noise, not the filter
    started = time.perf_counter_ns()
    for events in work:
        hub.dispatch(events)
        for conn in hub.connections:  # what the sender would take (kept out of the memory)
            if conn._queue is not None:
                conn._queue.clear()
    elapsed = time.perf_counter_ns() - started
    gc.enable()
    return elapsed / (conns * batch * batches)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--conns", type=int, default=1000)
    parser.add_argument("--sessions", type=int, default=20)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--batches", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "scope.json")
    args = parser.parse_args()
    modes = ("unscoped", "scoped_all", "scoped_half")
    samples: dict[str, list[float]] = {m: [] for m in modes}
    for _ in range(args.rounds):
        for mode in modes:  # interleaved: load changes hit every mode alike
            samples[mode].append(measure(args.conns, args.sessions, args.batch, args.batches, mode))
    result = {
        "params": vars(args) | {"out": str(args.out.name)},
        "python": platform.python_version(),
        "ns_per_offer": {m: round(statistics.median(v), 1) for m, v in samples.items()},
        # The least-disturbed round: on a shared, loaded machine the fairer comparison.
        "ns_per_offer_min": {m: round(min(v), 1) for m, v in samples.items()},
        # Each round measures the modes back to back: the ratio within a round is the least
        # disturbed by the machine's load drifting between rounds.
        "scoped_all_over_unscoped_median": round(
            statistics.median(
                a / u for a, u in zip(samples["scoped_all"], samples["unscoped"], strict=True)
            ),
            3,
        ),
        "samples": {m: [round(x, 1) for x in v] for m, v in samples.items()},
    }
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(
        json.dumps(
            {
                "median": result["ns_per_offer"],
                "min": result["ns_per_offer_min"],
                "ratio": result["scoped_all_over_unscoped_median"],
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
