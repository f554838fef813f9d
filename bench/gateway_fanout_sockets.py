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

from relaybus.gateway.delivery.connection import Connection
from relaybus.gateway.delivery.events import Event
from relaybus.gateway.delivery.fanout import Hub
from relaybus.gateway.delivery.replay import Merged
from relaybus.gateway.metrics import GatewayMetrics
from relaybus.gateway.web.wsconn import WsConnection, WsLimits

SID = "s1"


class Sink(WsConnection):
    __slots__ = ()
    limits = WsLimits(max_size=1 << 20, ping_interval=None, ping_timeout=None, trusted=None)

    def _before_open(self, data: bytes) -> None:
        raise AssertionError


async def hub_of(clients: int) -> tuple[Hub, list[socket.socket]]:
    hub = Hub(GatewayMetrics(CollectorRegistry()))
    peers = []
    loop = asyncio.get_running_loop()
    for i in range(clients):
        ours, theirs = socket.socketpair()
        theirs.setblocking(False)
        _, sink = await loop.connect_accepted_socket(lambda: Sink(set()), ours)
        sink._opened()
        conn = Connection(
            sink, cid=f"c{i}", metrics=hub.metrics, queue_max=10**6, buffer_max=10**6, position=0
        )
        hub.add(conn)
        conn.state.accept_hello(["session_subscriptions"], 0)
        conn.state.finish_resume(0, holes=True)
        conn.state.welcome()
        hub.refresh(conn)
        conn.state.begin_watch(SID)
        hub.watch(conn, SID)
        conn.state.finish_watch(SID, Merged())
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
