"""Seed (v1) clients served exactly: URL resume, seqId on every frame, nothing before welcome."""

from __future__ import annotations

import redis.asyncio as aioredis

from relaybus.shared.settings import Settings
from relaybus.shared.store.keys import Keys
from tests.support.gateway_client import Frame, WsClient
from tests.support.gateway_publish import Publisher
from tests.support.gateway_server import RunningGateway, running_gateway
from tests.support.wait import wait_for


def texts(frames: list[Frame]) -> list[str]:
    return [f["event"]["blocks"][0]["text"] for f in frames]


async def test_v1_client_resumes_with_last_seq_id_in_url(
    gw: RunningGateway, pub: Publisher
) -> None:
    """A client that sends no hello but connects with ?lastSeqId= gets every event after it."""
    await pub.start_session("s1")
    seen = await pub.events("s1", ["a", "b"])
    await pub.events("s1", ["c", "d"])
    await pub.end("s1")
    async with WsClient(f"{gw.ws}?lastSeqId={seen.last_seq}", token="full-token") as c:
        await c.expect("session_ended")
        await pub.start_session("s2")
        await pub.events("s2", ["live"])
        await c.until(lambda _: len(c.events()) == 3)
    assert texts(c.events()) == ["c", "d", "live"]
    types = [f["type"] for f in c.received]
    assert "welcome" not in types and "gap_detected" not in types
    assert types.index("session_ended") < types.index("session_started")
    seqs = [f["seqId"] for f in c.received]
    assert seqs == sorted(seqs) and seqs[0] == seen.last_seq + 1


async def test_v1_url_resume_with_stale_epoch_reports_gap(
    gw: RunningGateway, pub: Publisher
) -> None:
    """?epoch= that is not the current one: gap_detected{epoch} with a seqId, then the log from 1."""
    await pub.start_session("s1")
    await pub.events("s1", ["x"])
    async with WsClient(f"{gw.ws}?lastSeqId=1&epoch=old-epoch", token="full-token") as c:
        gap = await c.expect("gap_detected")
        await c.until(lambda _: len(c.events()) == 1)
    assert c.received[0] is gap
    assert (gap["reason"], gap["epoch"], gap["seqId"]) == ("epoch", gw.runtime.hub.epoch, 0)
    assert [f["type"] for f in c.received[1:]] == ["session_started", "session_event"]


async def test_v1_url_resume_first_frame_resolves_at_once(
    settings: Settings, pub: Publisher
) -> None:
    """A v1 client's first request resolves it (replay first, then the answer), no grace wait."""
    await pub.start_session("s1")
    cut = await pub.events("s1", ["old"])
    await pub.events("s1", ["new"])
    async with (
        running_gateway(settings, hello_grace_s=30.0) as g,
        WsClient(f"{g.ws}?lastSeqId={cut.last_seq}", token="full-token") as c,
    ):
        await c.send({"type": "list_sessions", "requestId": "r1"})
        await c.expect("sessions", wait_s=5)
    assert [f["type"] for f in c.received] == ["session_event", "sessions"]
    assert texts(c.events()) == ["new"]


async def test_bad_last_seq_id_in_url_is_an_error_not_a_resume(
    gw: RunningGateway, pub: Publisher
) -> None:
    """?lastSeqId=abc gets error{invalid_field} and the connection goes on as plain v1."""
    await pub.start_session("s1")
    before = await pub.events("s1", ["before"])
    # Connect only once the gateway's reader is past "before", or it would arrive live.
    await wait_for(lambda: gw.runtime.hub.position >= before.last_seq, timeout_s=10.0)
    async with WsClient(f"{gw.ws}?lastSeqId=abc", token="full-token") as c:
        err = await c.expect("error")
        await pub.events("s1", ["live"])
        await c.until(lambda _: len(c.events()) == 1)
        for _ in range(2):  # a later frame brings no second error (it would come between)
            await c.send({"type": "list_sessions"})
            await c.expect("sessions")
    assert err["code"] == "invalid_field" and isinstance(err["seqId"], int)
    assert texts(c.events()) == ["live"]
    assert len(c.of_type("error")) == 1


async def test_hello_ignores_url_resume(gw: RunningGateway, pub: Publisher) -> None:
    """A client that sends hello resumes from hello.lastSeqId only, never from the URL."""
    await pub.start_session("s1")
    a = await pub.events("s1", ["a"])
    # Connect only once the gateway's reader is past "a", or it would arrive live.
    await wait_for(lambda: gw.runtime.hub.position >= a.last_seq, timeout_s=10.0)
    async with WsClient(f"{gw.ws}?lastSeqId=0", token="full-token") as c:
        await c.hello([])
        await pub.events("s1", ["b"])
        await c.until(lambda _: len(c.events()) == 1)
    assert texts(c.events()) == ["b"] and c.received[0]["type"] == "welcome"


async def test_reader_gap_waits_for_welcome(
    settings: Settings, pub: Publisher, rclient: aioredis.Redis, keys: Keys
) -> None:
    """A reader gap while a client has not sent hello yet reaches it after its welcome, through
    the merge of its buffer; clients already welcomed get it at once; every gap has a seqId."""
    await pub.start_session("s1")
    async with (
        running_gateway(settings, hello_grace_s=30.0) as g,
        WsClient(g.ws, token="full-token") as early,
        WsClient(g.ws, token="full-token") as waiting,
    ):
        await early.hello([])
        position = g.runtime.hub.position
        await rclient.incrby(keys.seq, 3)  # three seqs the log no longer holds (trimmed)
        await pub.events("s1", ["after the gap"])
        await early.until(lambda _: len(early.events()) == 1)
        await waiting.hello([])
        await waiting.until(lambda _: len(waiting.events()) == 1)
    want = {
        "type": "gap_detected",
        "fromSeqId": position + 1,
        "toSeqId": position + 3,
        "reason": "trimmed",
        "seqId": position,
    }
    assert [f["type"] for f in early.received] == ["welcome", "gap_detected", "session_event"]
    assert early.received[1] == want
    assert [f["type"] for f in waiting.received] == ["welcome", "gap_detected", "session_event"]
    assert waiting.received[1] == want


async def test_late_hello_does_not_repeat_what_v1_delivered_live(
    gw: RunningGateway, pub: Publisher
) -> None:
    """Events delivered live to a v1 connection are not replayed by a later hello{lastSeqId}."""
    await pub.start_session("s1")
    async with WsClient(gw.ws, token="full-token") as c:
        await c.send({"type": "list_sessions"})  # resolved as v1 now
        await c.expect("sessions")
        await pub.events("s1", ["live to v1"])
        await c.until(lambda _: len(c.events()) == 1)
        await c.hello([], lastSeqId=0)
        await pub.events("s1", ["after"])
        await c.until(lambda _: len(c.events()) >= 2)
        await c.send({"type": "list_sessions"})
        await c.expect("sessions")
    assert texts(c.events()) == ["live to v1", "after"]
