"""The fan-out's fast path (``gateway/delivery/steady.py``) on real sockets: a run written
straight to steady transports, and every transition that ends a steady state taking the
connection back to the checked path, with nothing lost, repeated, reordered or out of scope.

Each connection is a real :class:`WsConnection` on one end of a socket pair (asyncio's own
transport, flow control included); the test reads the other end and parses the frames.
"""

from __future__ import annotations

import asyncio
import socket
import struct
from collections.abc import AsyncIterator, Sequence
from typing import Any

import orjson
import pytest
from prometheus_client import CollectorRegistry

from relaybus.gateway.delivery.connection import Connection
from relaybus.gateway.delivery.events import Event
from relaybus.gateway.delivery.fanout import Hub
from relaybus.gateway.delivery.replay import Merged
from relaybus.gateway.metrics import GatewayMetrics
from relaybus.gateway.web.wsconn import WsConnection, WsLimits
from relaybus.shared.wire import frames as wire_frames


class Sink(WsConnection):
    __slots__ = ()
    limits = WsLimits(max_size=1 << 20, ping_interval=None, ping_timeout=None, trusted=None)

    def _before_open(self, data: bytes) -> None:
        raise AssertionError("opened by the test")


class Peer:
    """The client's end of one connection: the frames read so far."""

    def __init__(self, conn: Connection, sink: Sink, sock: socket.socket) -> None:
        self.conn, self.sink, self.sock = conn, sink, sock
        self.buf = b""
        self.frames: list[dict[str, Any]] = []

    def read(self) -> None:
        """Take everything the socket holds now."""
        while True:
            try:
                chunk = self.sock.recv(1 << 20)
            except BlockingIOError:
                break
            if not chunk:
                break
            self.buf += chunk
        while len(self.buf) >= 2:
            n, at = self.buf[1] & 0x7F, 2
            if n == 126:
                n, at = struct.unpack("!H", self.buf[2:4])[0], 4
            elif n == 127:
                n, at = struct.unpack("!Q", self.buf[2:10])[0], 10
            if len(self.buf) < at + n:
                break
            assert self.buf[0] == 0x81, "text frames only"
            self.frames.append(orjson.loads(self.buf[at : at + n]))
            self.buf = self.buf[at + n :]

    async def settle(self) -> None:
        """Read until the server side has nothing left to write."""
        for _ in range(500):
            await asyncio.sleep(0.005)
            self.read()
            transport = self.sink.transport
            assert transport is not None
            if not transport.get_write_buffer_size() and self.conn.queued_bytes == 0:
                self.read()
                return
        raise AssertionError("the connection never drained")

    def seqs(self, sid: str | None = None) -> list[int]:
        """Seqs of the log frames read (direct frames and gaps left out)."""
        return [f["seqId"] for f in self.frames if "sid" in f and sid in (None, f["sid"])]


#: The client ends of the test's connections (closed after it).
OPEN: list[Peer] = []


@pytest.fixture
async def hub() -> AsyncIterator[Hub]:
    yield Hub(GatewayMetrics(CollectorRegistry()))
    while OPEN:
        p = OPEN.pop()
        p.conn.abort(1001, "test over")
        await p.conn.finish()
        if p.sink.transport is not None:
            p.sink.transport.abort()
        p.sock.close()
    await asyncio.sleep(0)  # the transports' connection_lost


async def peer(
    hub: Hub, *, watch: Sequence[str] = ("s1",), v1: bool = False, blocks_only: bool = False
) -> Peer:
    """A live connection: a v1 client (the firehose) or a watcher of ``watch``."""
    ours, theirs = socket.socketpair()
    theirs.setblocking(False)
    transport, sink = await asyncio.get_running_loop().connect_accepted_socket(
        lambda: Sink(set()), ours
    )
    transport.set_write_buffer_limits(high=32 * 1024)
    sink._opened()
    conn = Connection(
        sink, cid=f"c{len(hub.connections)}", metrics=hub.metrics, queue_max=10_000,
        buffer_max=10_000, position=hub.position,
    )  # fmt: skip
    hub.add(conn)
    state = conn.state
    if not v1:
        caps = ["session_subscriptions"] + (["blocks_only"] if blocks_only else [])
        state.accept_hello(caps, hub.position)
    state.finish_resume(hub.position, holes=True)
    state.welcome()
    hub.refresh(conn)
    for sid in () if v1 else watch:
        state.begin_watch(sid)
        hub.watch(conn, sid)
        state.finish_watch(sid, Merged(last_seq=hub.position))
    OPEN.append(Peer(conn, sink, theirs))
    return OPEN[-1]


class Log:
    """Events with consecutive seqs, as the reader hands them to the hub."""

    def __init__(self) -> None:
        self.seq = 0

    def ev(self, sid: str, kind: str = wire_frames.SESSION_EVENT, size: int = 10) -> Event:
        self.seq += 1
        frame = {"seqId": self.seq, "sid": sid, "event": {"blocks": [], "data": "x" * size}}
        return Event(self.seq, sid, kind, orjson.dumps(frame), 0)

    def run(self, sid: str, n: int, size: int = 10) -> list[Event]:
        return [self.ev(sid, size=size) for _ in range(n)]


def in_cache(hub: Hub, sid: str, p: Peer) -> bool:
    """Whether the next run of ``sid`` is written to ``p`` by the fast path (builds the cache)."""
    transport = p.sink.transport
    assert transport is not None
    return any(transport.write in writes for _, writes in hub._steady_of(sid).groups)


def steady_writes(hub: Hub, sid: str) -> int:
    """How many transports the cache writes ``sid``'s runs to (0: none, or not built)."""
    found = hub._steady.get(sid)
    return 0 if found is None else sum(len(w) for _, w in found.groups)


async def test_runs_go_straight_to_steady_transports_in_order(hub: Hub) -> None:
    """Watchers of both variants and a v1 client: a one-run batch is written by the fast path,
    a batch that mixes runs of two sessions with a broadcast frame by the checked path, then
    a run of the other session fast again: each frame once, in seq order, counted once."""
    log = Log()
    plain, bare, v1, other = (
        await peer(hub),
        await peer(hub, blocks_only=True),
        await peer(hub, v1=True),
        await peer(hub, watch=("s2",)),
    )
    sent0 = hub.metrics.sent(wire_frames.SESSION_EVENT)._value.get()
    hub.dispatch(log.run("s1", 3))
    assert steady_writes(hub, "s1") == 3
    mixed = [log.ev("s9", wire_frames.SESSION_STARTED), *log.run("s1", 2), *log.run("s2", 2)]
    hub.dispatch(mixed)
    assert "s2" not in hub._steady  # the checked path
    hub.dispatch(log.run("s2", 2))
    assert steady_writes(hub, "s2") == 2
    hub.dispatch([*log.run("s1", 2), log.ev("s9", wire_frames.SESSION_ENDED), *log.run("s2", 1)])
    for p in (plain, bare, v1, other):
        await p.settle()
    assert plain.seqs() == bare.seqs() == [1, 2, 3, 4, 5, 6, 11, 12, 13]
    assert v1.seqs() == list(range(1, 15))
    assert other.seqs() == [4, 7, 8, 9, 10, 13, 14]
    assert all("data" not in f["event"] for f in bare.frames if f["seqId"] not in (4, 13))
    assert all(f["event"]["data"] for f in plain.frames)
    sent = hub.metrics.sent(wire_frames.SESSION_EVENT)._value.get()
    assert sent - sent0 == 7 + 7 + 12 + 5


async def test_a_paused_transport_is_never_written_by_the_fast_path(hub: Hub) -> None:
    """A client that stops reading: once its transport pauses, later runs queue (not written)
    and the cache leaves it out; when it reads again it gets every event once, in order."""
    log = Log()
    slow, fast = await peer(hub), await peer(hub)
    while slow.sink.ok:
        hub.dispatch(log.run("s1", 4, size=4000))
        fast.read()
    paused_at = slow.sink.transport.get_write_buffer_size()  # type: ignore[union-attr]
    for _ in range(5):
        assert in_cache(hub, "s1", fast) and not in_cache(hub, "s1", slow)
        hub.dispatch(log.run("s1", 4, size=4000))
        fast.read()
        assert slow.sink.transport.get_write_buffer_size() == paused_at  # type: ignore[union-attr]
    assert slow.conn.queued_bytes > 0
    await slow.settle()
    await fast.settle()
    everything = list(range(1, log.seq + 1))
    assert slow.seqs() == fast.seqs() == everything
    assert in_cache(hub, "s1", slow)  # drained and writable again: steady once more
    hub.dispatch(log.run("s1", 2))
    await slow.settle()
    assert slow.seqs() == list(range(1, log.seq + 1))


async def test_each_transition_drops_the_cache_and_keeps_the_stream_exact(hub: Hub) -> None:
    """unwatch, watch again (replay buffer start and end), a scope, a direct frame queued,
    an epoch reset, a rewind and an abort: each drops the cache at once; the runs around it
    reach the client exactly as the checked path would send them."""
    log = Log()
    p, witness = await peer(hub), await peer(hub)
    state = p.conn.state

    def step(steady: bool, others: bool = True) -> None:
        assert in_cache(hub, "s1", p) is steady and in_cache(hub, "s1", witness) is others
        hub.dispatch(log.run("s1", 2))

    step(True)
    hub.unwatch(p.conn, "s1")
    assert not hub._steady
    step(False)  # not watched: not sent
    hub._steady_of("s1")
    state.begin_watch("s1")
    assert not hub._steady
    hub.watch(p.conn, "s1")
    step(False)  # buffered for the watch's replay, not written
    tail = state.finish_watch("s1", Merged(last_seq=log.seq - 2))
    assert not hub._steady
    p.conn.send_burst([p.conn.event_out(ev, live=True) for ev in tail.items])  # type: ignore[arg-type]
    step(False)  # after the queued replay, never before it
    await p.settle()
    assert p.seqs() == [1, 2, 5, 6, 7, 8]
    step(True)
    p.conn.send({"type": "pong"})
    assert not hub._steady
    step(False)
    await p.settle()
    assert p.seqs()[-2:] == [11, 12] and p.frames[-3]["type"] == "pong"
    hub.rewound(log.seq - 1, log.seq)
    assert not hub._steady
    log.seq -= 2
    step(False, False)  # the rewound seqs again, after the gap frame (queued for both)
    hub.epoch_changed("e2", log.seq)
    assert not hub._steady
    log.seq = 0
    step(False, False)  # seqs restart at 1, after the gap frame
    await p.settle()
    await witness.settle()
    step(True)
    await p.settle()
    gaps = [f["reason"] for f in p.frames if f.get("type") == "gap_detected"]
    assert gaps == ["rewound", "epoch"]
    sent = [1, 2, 5, 6, 7, 8, 9, 10, 11, 12, 11, 12, 1, 2, 3, 4]
    assert p.seqs() == sent
    state.restrict(frozenset({"s2"}))
    assert not hub._steady
    step(False)  # out of scope
    p.conn.abort(1001, "bye")
    assert not hub._steady
    step(False)  # closed
    await p.settle()
    await witness.settle()
    assert p.seqs() == sent
    assert witness.seqs() == [*range(1, 13), 11, 12, *range(1, 9)]


async def test_a_mark_above_the_reader_keeps_a_connection_on_the_checked_path(hub: Hub) -> None:
    """A watch whose replay read past the reader (its mark above the head): the runs up to
    the mark are not sent to it again, and the others still take the fast path."""
    log = Log()
    p, witness = await peer(hub), await peer(hub)
    hub.dispatch(log.run("s1", 2))
    p.conn.state.begin_watch("s1")
    p.conn.state.finish_watch("s1", Merged(last_seq=log.seq + 3))  # it has 3, 4 and 5
    assert in_cache(hub, "s1", witness) and not in_cache(hub, "s1", p)
    hub.dispatch(log.run("s1", 4))
    hub.dispatch(log.run("s1", 2))
    await p.settle()
    await witness.settle()
    assert p.seqs() == [1, 2, 6, 7, 8]
    assert witness.seqs() == list(range(1, 9))
