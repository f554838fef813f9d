"""A reader batch holding many events of one session (a run) reaches every kind of
connection exactly once, in order, and is counted per frame."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from prometheus_client import CollectorRegistry

from relaybus.gateway.delivery.connection import Connection
from relaybus.gateway.delivery.events import Event
from relaybus.gateway.delivery.fanout import Hub
from relaybus.gateway.delivery.replay import Merged
from relaybus.gateway.frames import Outgoing
from relaybus.gateway.metrics import GatewayMetrics
from relaybus.shared.wire import frames as wire_frames
from tests.support.gateway_client import WsClient
from tests.support.gateway_publish import Publisher
from tests.support.gateway_server import RunningGateway


def seqs(frames: list[dict[str, Any]]) -> list[int]:
    return [f["seqId"] for f in frames]


async def test_run_reaches_every_kind_of_client_once_in_order(
    gw: RunningGateway, pub: Publisher
) -> None:
    """One append of 30 events (one XREAD) to a plain watcher, a blocks_only watcher, a v1
    client and a watcher of another session; then runs of two sessions back to back."""
    await pub.start_session("s1")
    await pub.start_session("s2")
    async with (
        WsClient(gw.ws, token="full-token") as plain,
        WsClient(gw.ws, token="full-token") as bare,
        WsClient(gw.ws, token="full-token") as other,
        WsClient(gw.ws, token="full-token") as v1,
    ):
        await plain.hello(["session_subscriptions"])
        await bare.hello(["session_subscriptions", "blocks_only"])
        await other.hello(["session_subscriptions"])
        for c, sid in ((plain, "s1"), (bare, "s1"), (other, "s2")):
            await c.watch(sid)
        await pub.start_session("s3")  # reaches the v1 client once it is live
        await v1.until(lambda _: len(v1.of_type("session_started")) == 1)
        sent0 = gw.metric("relaybus_gateway_messages_sent_total", {"type": "session_event"})
        one = await pub.events("s1", [f"a{i}" for i in range(30)], data_bytes=64)
        two = await pub.events("s2", [f"b{i}" for i in range(5)])
        three = await pub.events("s1", [f"c{i}" for i in range(5)])
        await v1.until(lambda _: len(v1.events()) == 40)
        await plain.until(lambda _: len(plain.events()) == 35)
        await bare.until(lambda _: len(bare.events()) == 35)
        await other.until(lambda _: len(other.events()) == 5)
    s1 = list(range(one.first_seq, one.last_seq + 1)) + list(
        range(three.first_seq, three.last_seq + 1)
    )
    s2 = list(range(two.first_seq, two.last_seq + 1))
    assert seqs(plain.events()) == s1 and seqs(bare.events()) == s1
    assert seqs(other.events()) == s2 and seqs(v1.events()) == sorted(s1 + s2)
    assert [e["event"]["blocks"][0]["text"] for e in plain.events()][:3] == ["a0", "a1", "a2"]
    assert all("data" in e["event"] for e in plain.events())
    assert not any("data" in e["event"] for e in bare.events())
    sent = gw.metric("relaybus_gateway_messages_sent_total", {"type": "session_event"})
    assert sent - sent0 == 35 + 35 + 5 + 40


async def test_run_skips_what_a_connection_already_has(gw: RunningGateway, pub: Publisher) -> None:
    """A watcher whose session mark lies inside a run (its replay read second of the reader)
    gets only the run's events above the mark, once."""
    await pub.start_session("s1")
    async with (
        WsClient(gw.ws, token="full-token") as second,
        WsClient(gw.ws, token="full-token") as plain,
    ):
        for c in (second, plain):
            await c.hello(["session_subscriptions"])
            await c.watch("s1")
        hub = gw.runtime.hub
        assert len(hub.watchers["s1"]) == 2
        head = hub.position
        # One connection's mark as a replay that read 10 entries past the reader leaves it.
        next(iter(hub.watchers["s1"])).state.finish_watch("s1", Merged(last_seq=head + 10))
        appended = await pub.events("s1", [f"e{i}" for i in range(20)])
        await plain.until(lambda _: len(plain.events()) >= 10)
        await second.until(lambda _: len(second.events()) >= 10)
        await pub.events("s1", ["end"])
        await plain.until(lambda _: plain.events()[-1]["event"]["blocks"][0]["text"] == "end")
        await second.until(lambda _: second.events()[-1]["event"]["blocks"][0]["text"] == "end")
    assert appended.first_seq == head + 1
    everything = list(range(appended.first_seq, appended.last_seq + 2))
    got = sorted([seqs(plain.events()), seqs(second.events())], key=len)
    assert got == [everything[10:], everything]


class TakeAll:
    """A sink whose transport takes every write at once; it keeps the bytes written."""

    raw_ok = True

    def __init__(self) -> None:
        self.written: list[bytes] = []

    async def send_many(self, items: Sequence[Outgoing]) -> None:
        raise AssertionError("a live write that the transport takes is never queued")

    def abort(self) -> None:
        raise AssertionError("nothing is cut off here")

    def write_now(self, items: Sequence[Outgoing]) -> bool:
        self.written.append(b"".join(item.wire or b"" for item in items))
        return True

    def steady_write(self, changed: Callable[[], object]) -> None:
        return None  # every write goes through write_now: the checked path is tested


def test_a_batch_is_counted_once_per_frame_written() -> None:
    """Connections of two kinds, interleaved, write their shared bursts (one run, then a run
    of another session and a lone event): frames and bytes counted are exactly those written."""
    registry = CollectorRegistry()
    hub = Hub(GatewayMetrics(registry))
    sinks = []
    for i in range(6):
        sink = TakeAll()
        conn = Connection(
            sink, cid=f"c{i}", metrics=hub.metrics, queue_max=100, buffer_max=100, position=0
        )
        conn.state.global_buffer = None
        conn.state.welcomed = True
        conn.state.blocks_only = i % 2 == 1
        hub.add(conn)
        sinks.append(sink)

    def event(seq: int, sid: str) -> Event:
        prefix = wire_frames.session_event(sid, {"type": "user", "blocks": [], "data": {"n": seq}})
        frame = prefix + b',"seqId":%d}' % seq  # as the append script completes it
        return Event(seq, sid, wire_frames.SESSION_EVENT, frame, 0)

    hub.dispatch([event(1, "a"), event(2, "a"), event(3, "a")])
    hub.dispatch([event(4, "a"), event(5, "b"), event(6, "b")])

    def sample(name: str) -> float:
        value = registry.get_sample_value(name, {"type": wire_frames.SESSION_EVENT})
        return value if value is not None else registry.get_sample_value(name) or 0.0

    assert all(len(sink.written) == 2 for sink in sinks)
    assert sample("relaybus_gateway_messages_sent_total") == 6 * 6
    written = sum(len(chunk) for sink in sinks for chunk in sink.written)
    assert sample("relaybus_gateway_bytes_sent_total") == written
    # blocks_only connections wrote fewer bytes: both variants were counted as written
    assert len(sinks[1].written[0]) < len(sinks[0].written[0])
