"""In-process cost of the fan-out per delivery: ``Hub.dispatch`` to real ``WsConnection``
sinks whose transports take every write (no sockets, no event loop work).

Each connection says hello with ``session_subscriptions`` and watches one session, as the
latency bench's clients do; every batch is one event of that session. Prints ns per
delivery, best of ``--repeat``. Run it under two trees to compare them side by side:

    PYTHONPATH=/tmp/before python bench/gateway_fanout_inproc.py --clients 1000
"""

from __future__ import annotations

import argparse
import gc
import json
import time
from typing import Any

import orjson
from prometheus_client import CollectorRegistry
from rig.hub_rig import SID, Sink, watching

from relaybus.gateway.delivery.events import Event
from relaybus.gateway.delivery.fanout import Hub
from relaybus.gateway.metrics import GatewayMetrics


class Transport:
    """Takes every write (its bytes are counted, not kept)."""

    def __init__(self) -> None:
        self.bytes = 0

    def write(self, data: bytes) -> None:
        self.bytes += len(data)

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default

    def is_closing(self) -> bool:
        return False


def hub_of(clients: int) -> tuple[Hub, list[Transport]]:
    hub = Hub(GatewayMetrics(CollectorRegistry()))
    transports = []
    for i in range(clients):
        sink = Sink(set())
        transport = Transport()
        sink.connection_made(transport)  # type: ignore[arg-type]
        watching(hub, sink, f"c{i}")
        transports.append(transport)
    return hub, transports


def frame(seq: int) -> bytes:
    block = {"type": "text", "text": "x" * 1500}
    event = {"blocks": [block], "data": {"line": "y" * 500}}
    return orjson.dumps({"sessionId": SID, "seq": seq, "sessionSeq": seq, "event": event})


def measure(clients: int, batches: int, repeat: int) -> float:
    hub, transports = hub_of(clients)
    gc.freeze()  # as the gateway does after start
    seq = 0
    best = float("inf")
    for _ in range(repeat):
        events = []
        for _ in range(batches):
            seq += 1
            events.append([Event(seq, SID, "session_event", frame(seq), 0)])
        t0 = time.perf_counter_ns()
        for batch in events:
            hub.dispatch(batch)
        best = min(best, (time.perf_counter_ns() - t0) / (batches * clients))
    assert all(t.bytes == transports[0].bytes > 0 for t in transports), "a client missed frames"
    return best


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--clients", type=int, default=1000)
    p.add_argument("--batches", type=int, default=200)
    p.add_argument("--repeat", type=int, default=5)
    a = p.parse_args()
    ns = measure(a.clients, a.batches, a.repeat)
    print(json.dumps({"clients": a.clients, "ns_per_delivery": round(ns)}))


if __name__ == "__main__":
    main()
