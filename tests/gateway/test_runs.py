"""A reader batch holding many events of one session (a run) reaches every kind of
connection exactly once, in order, and is counted per frame."""

from __future__ import annotations

from typing import Any

from relaybus.gateway.delivery.replay import Merged
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
            await c.send({"type": "watch_session", "sessionId": sid})
            await c.expect("watch_ack")
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
            await c.send({"type": "watch_session", "sessionId": "s1"})
            await c.expect("watch_ack")
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
