"""The fan-out's CPU per delivery on real sockets, in one process: ``Hub.dispatch`` to
``--clients`` real ``WsConnection``s on socket pairs, one run of one session per batch (the
latency bench's shape); the user and system time of the dispatches alone (the client ends
are read between them, untimed). Run it under two trees to compare them side by side:

    PYTHONPATH=/tmp/before python bench/gateway_fanout_sockets.py --clients 300
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import resource
import socket

import orjson
from prometheus_client import CollectorRegistry
from rig.hub_rig import SID, Sink, watching

from relaybus.gateway.delivery.events import Event
from relaybus.gateway.delivery.fanout import Hub
from relaybus.gateway.metrics import GatewayMetrics


async def hub_of(clients: int) -> tuple[Hub, list[socket.socket]]:
    hub = Hub(GatewayMetrics(CollectorRegistry()))
    peers = []
    loop = asyncio.get_running_loop()
    for i in range(clients):
        ours, theirs = socket.socketpair()
        theirs.setblocking(False)
        _, sink = await loop.connect_accepted_socket(lambda: Sink(set()), ours)
        watching(hub, sink, f"c{i}")
        peers.append(theirs)
    return hub, peers


def frame(seq: int) -> bytes:
    event = {"blocks": [{"type": "text", "text": "x" * 1500}], "data": {"line": "y" * 2000}}
    return orjson.dumps({"sessionId": SID, "seq": seq, "sessionSeq": seq, "event": event})


async def measure(clients: int, batches: int) -> dict[str, float]:
    hub, peers = await hub_of(clients)
    gc.freeze()
    user = system = 0.0
    received = 0
    for seq in range(1, batches + 1):
        batch = [Event(seq, SID, "session_event", frame(seq), 0)]
        r0 = resource.getrusage(resource.RUSAGE_SELF)
        hub.dispatch(batch)
        r1 = resource.getrusage(resource.RUSAGE_SELF)
        user += r1.ru_utime - r0.ru_utime
        system += r1.ru_stime - r0.ru_stime
        await asyncio.sleep(0)
        for s in peers:
            while True:
                try:
                    got = s.recv(1 << 16)
                except BlockingIOError:
                    break
                received += len(got)
    n = clients * batches
    return {"user_us": round(user / n * 1e6, 2), "system_us": round(system / n * 1e6, 2)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--clients", type=int, default=300)
    p.add_argument("--batches", type=int, default=300)
    a = p.parse_args()
    print(json.dumps({"clients": a.clients, **asyncio.run(measure(a.clients, a.batches))}))


if __name__ == "__main__":
    main()
