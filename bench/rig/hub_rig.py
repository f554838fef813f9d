"""In-process fan-out harness pieces: a bare ``/ws`` sink and a connection watching one
session, live, on a :class:`~relaybus.gateway.delivery.fanout.Hub` (the gateway_fanout_*
benches)."""

from __future__ import annotations

from relaybus.gateway.delivery.connection import Connection
from relaybus.gateway.delivery.fanout import Hub
from relaybus.gateway.delivery.replay import Merged
from relaybus.gateway.web.wsconn import WsConnection, WsLimits

SID = "s1"


class Sink(WsConnection):
    """relaybus's ``/ws`` protocol, opened without a handshake (no pings)."""

    __slots__ = ()
    limits = WsLimits(max_size=1 << 20, ping_interval=None, ping_timeout=None, trusted=None)

    def _before_open(self, data: bytes) -> None:
        raise AssertionError


def watching(hub: Hub, sink: Sink, cid: str) -> Connection:
    """A connection on ``sink`` that said hello, watches :data:`SID` and is live."""
    sink._opened()
    conn = Connection(
        sink, cid=cid, metrics=hub.metrics, queue_max=10**6, buffer_max=10**6, position=0
    )
    hub.add(conn)
    conn.state.accept_hello(["session_subscriptions"], 0)
    conn.state.finish_resume(0, holes=True)
    conn.state.welcome()
    hub.refresh(conn)
    conn.state.begin_watch(SID)
    hub.watch(conn, SID)
    conn.state.finish_watch(SID, Merged())
    return conn
