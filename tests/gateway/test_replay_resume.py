"""Replay/live merge under a racing writer, resume by lastSeqId, gaps on trimmed streams."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import cast

import redis.asyncio as aioredis

from relaybus.gateway.delivery.history import Page
from relaybus.shared.settings import Settings
from relaybus.shared.store.keys import Keys
from tests.support.collector_records import Entries
from tests.support.gateway_client import FULL, Frame, WsClient
from tests.support.gateway_publish import Publisher
from tests.support.gateway_server import RunningGateway, running_gateway
from tests.support.wait import wait_for


def texts(frames: list[Frame]) -> list[str]:
    return [f["event"]["blocks"][0]["text"] for f in frames]


async def test_replay_during_append_race(settings: Settings, pub: Publisher) -> None:
    """Watchers joining while hundreds of events are appended see each event once, no holes."""
    total = 600
    await pub.start_session("s1")

    async def writer() -> None:
        for i in range(0, total, 3):
            await pub.events("s1", [str(i), str(i + 1), str(i + 2)])

    async with running_gateway(settings.model_copy(update={"replay_depth": 5000})) as g:
        clients = [WsClient(g.ws, token="full-token") for _ in range(6)]
        task = asyncio.create_task(writer())
        for i, c in enumerate(clients):
            await c.__aenter__()
            await c.hello(["session_subscriptions"])
            await c.send({"type": "watch_session", "sessionId": "s1"})
            await asyncio.sleep(0.01 * i)
        await task
        try:
            for c in clients:
                await c.until(lambda r: c.n_events >= total, 60)  # noqa: B023  # awaited before the loop moves on
                await c.send({"type": "list_sessions"})
                await c.expect("sessions")  # anything duplicated would have arrived before this
        finally:
            for c in clients:
                await c.__aexit__(None, None, None)
    for c in clients:
        evs = c.events()
        assert [e["sessionSeq"] for e in evs] == list(range(1, total + 1))
        assert texts(evs) == [str(i) for i in range(total)]
        assert not c.of_type("gap_detected")


async def test_resume_replays_entitled_broadcasts(gw: RunningGateway, pub: Publisher) -> None:
    """hello.lastSeqId replays the missed broadcast-class messages (not unwatched session events)."""
    async with WsClient(gw.ws, token="full-token") as c:
        await c.hello(FULL)
        await pub.start_session("s1")
        first = await c.expect("session_started")
    await pub.events("s1", ["unwatched"])
    await pub.turn("s1", "working", since=5)
    await pub.start_session("s2")
    await pub.end("s1")
    async with WsClient(gw.ws, token="full-token") as c:
        await c.hello(FULL, lastSeqId=first["seqId"], epoch=gw.runtime.hub.epoch)
        await c.expect("session_ended")
        await c.send({"type": "list_sessions"})
        await c.expect("sessions")
    types = [f["type"] for f in c.received]
    assert types == ["welcome", "turn_status", "session_started", "session_ended", "sessions"]
    seqs = [f["seqId"] for f in c.received[1:4]]
    assert seqs == sorted(seqs) and seqs[0] > first["seqId"]


async def test_v1_resume_replays_session_events(gw: RunningGateway, pub: Publisher) -> None:
    """A client without session_subscriptions resuming gets every session event after lastSeqId."""
    await pub.start_session("s1")
    done = await pub.events("s1", ["a", "b"])
    await pub.events("s1", ["c", "d"])
    async with WsClient(gw.ws, token="full-token") as c:
        await c.hello([], lastSeqId=done.last_seq)
        await c.until(lambda _: len(c.events()) == 2)
        await pub.events("s1", ["e"])
        await c.until(lambda _: len(c.events()) == 3)
    assert texts(c.events()) == ["c", "d", "e"]


async def test_resume_with_live_traffic_is_exact(gw: RunningGateway, pub: Publisher) -> None:
    """Resuming while the writer keeps appending yields every missed event once, in order."""
    await pub.start_session("s1")
    cut = await pub.events("s1", ["0"])

    async def writer() -> None:
        for i in range(1, 301):
            await pub.events("s1", [str(i)])

    task = asyncio.create_task(writer())
    await asyncio.sleep(0.05)
    async with WsClient(gw.ws, token="full-token") as c:
        await c.hello([], lastSeqId=cut.last_seq)
        await task
        await c.until(lambda _: c.n_events >= 300, 60)
        await c.send({"type": "list_sessions"})
        await c.expect("sessions")
    assert texts(c.events()) == [str(i) for i in range(1, 301)]


async def test_gap_on_trimmed_log(gw: RunningGateway, rclient: aioredis.Redis, keys: Keys) -> None:
    """lastSeqId older than the log's oldest entry: gap_detected{trimmed} first, then the rest."""
    small = Publisher(rclient, keys, log_maxlen=100)
    await small.start_session("s1")
    for _ in range(10):
        await small.events("s1", [f"e{i}" for i in range(50)])
    oldest = int(cast(Entries, await rclient.xrange(keys.log, count=1))[0][0].split(b"-")[0])
    assert oldest > 10
    async with WsClient(gw.ws, token="full-token") as c:
        await c.hello([], lastSeqId=5)
        await c.until(lambda _: len(c.events()) == 501 - oldest + 1)
    gap = c.received[1]
    assert gap == {
        "type": "gap_detected",
        "fromSeqId": 6,
        "toSeqId": oldest - 1,
        "reason": "trimmed",
        "seqId": 5,
    }
    assert [f["type"] for f in c.received[:2]] == ["welcome", "gap_detected"]
    assert [e["seqId"] for e in c.events()] == list(range(oldest, 502))
    assert gw.metric("relaybus_gateway_gaps_total", {"reason": "trimmed"}) == 1


async def test_gap_on_epoch_mismatch(gw: RunningGateway, pub: Publisher) -> None:
    """hello with an epoch that is not the current one gets gap_detected{epoch} before anything else."""
    await pub.start_session("s1")
    async with WsClient(gw.ws, token="full-token") as c:
        await c.hello(FULL, lastSeqId=1, epoch="stale-epoch")
        gap = await c.expect("gap_detected")
        started = await c.expect("session_started")
    assert (gap["reason"], gap["epoch"]) == ("epoch", gw.runtime.hub.epoch)
    assert [f["type"] for f in c.received] == ["welcome", "gap_detected", "session_started"]
    assert started["seqId"] == 1


async def test_gap_on_trimmed_session_stream(
    gw: RunningGateway, rclient: aioredis.Redis, keys: Keys
) -> None:
    """watch_session.sinceSeqId older than the session stream: gap_detected{sessionId} first."""
    small = Publisher(rclient, keys, session_maxlen=10)
    await small.start_session("s1")
    for _ in range(10):
        await small.events("s1", [str(i) for i in range(20)])
    first = int(
        cast(Entries, await rclient.xrange(keys.session_events("s1"), count=1))[0][0].split(b"-")[0]
    )
    async with WsClient(gw.ws, token="full-token") as c:
        await c.hello(["session_subscriptions"])
        await c.send({"type": "watch_session", "sessionId": "s1", "sinceSeqId": 3})
        await c.until(lambda _: len(c.events()) == 201 - first + 1)
    assert [f["type"] for f in c.received[1:3]] == ["watch_ack", "gap_detected"]
    assert c.received[2] == {
        "type": "gap_detected",
        "sessionId": "s1",
        "fromSeqId": 4,
        "toSeqId": first - 1,
        "reason": "trimmed",
        "seqId": 3,
    }
    assert [e["seqId"] for e in c.events()] == list(range(first, 202))


async def test_no_gap_when_since_is_retained(gw: RunningGateway, pub: Publisher) -> None:
    """sinceSeqId still inside the session stream: no gap_detected, exact replay."""
    await pub.start_session("s1")
    mid = await pub.events("s1", ["a", "b"])
    await pub.events("s1", ["c"])
    async with WsClient(gw.ws, token="full-token") as c:
        await c.hello(["session_subscriptions"])
        await c.send({"type": "watch_session", "sessionId": "s1", "sinceSeqId": mid.first_seq})
        await c.until(lambda _: len(c.events()) == 2)
        await c.send({"type": "list_sessions"})
        await c.expect("sessions")
    assert texts(c.events()) == ["b", "c"] and not c.of_type("gap_detected")


async def test_late_hello_after_v1_start(settings: Settings, pub: Publisher) -> None:
    """A hello after the v1 grace period switches modes without duplicating delivered events."""
    await pub.start_session("s1")
    async with (
        running_gateway(settings, hello_grace_s=0.05) as g,
        WsClient(g.ws, token="full-token") as c,
    ):
        await pub.events("s1", ["v1-live"])
        await c.until(lambda _: len(c.events()) == 1)
        await c.hello([], lastSeqId=0)
        await pub.events("s1", ["after"])
        await c.until(lambda _: len(c.events()) >= 2)
        await c.send({"type": "list_sessions"})
        await c.expect("sessions")
    assert texts(c.events()) == ["v1-live", "after"]


def _hold_reader(gw: RunningGateway) -> tuple[asyncio.Event, asyncio.Event]:
    """Hold the gateway's log reader before its next XREAD: (held, release)."""
    reader, held, release = gw.runtime.reader, asyncio.Event(), asyncio.Event()
    step = reader._step

    async def gated() -> None:
        held.set()
        await release.wait()
        await step()

    reader._step = gated  # type: ignore[method-assign]
    return held, release


def _before_replay_read(gw: RunningGateway, first: Callable[[], Awaitable[None]]) -> None:
    """Run ``first`` before the resume's first page read, i.e. while the connection buffers."""
    pages = gw.runtime.router.resume.pages
    page, ran = pages.page, False

    async def late(stream: str, after: int, floor: int) -> Page:
        nonlocal ran
        if not ran:
            ran = True
            await first()
        return await page(stream, after, floor)

    pages.page = late  # type: ignore[method-assign]


async def _position(gw: RunningGateway, seq: int) -> None:
    def there() -> bool:
        return gw.runtime.hub.position >= seq

    await wait_for(there, what=f"reader at seq {seq}")


async def _oldest(rclient: aioredis.Redis, keys: Keys) -> int:
    """The seq of the log's oldest entry."""
    return int(cast(Entries, await rclient.xrange(keys.log, count=1))[0][0].split(b"-")[0])


async def test_reader_gap_during_resume_is_told_once(
    gw: RunningGateway, rclient: aioredis.Redis, keys: Keys
) -> None:
    """The reader's own trim gap, held while the resume replays, is not told again after the
    replay's gap covering it (a loaded gateway's reader lags behind the writer)."""
    held, release = _hold_reader(gw)
    await held.wait()
    small = Publisher(rclient, keys, log_maxlen=100)
    await small.start_session("s1")
    for _ in range(10):
        await small.events("s1", [f"e{i}" for i in range(50)])
    oldest = await _oldest(rclient, keys)

    async def reader_gap() -> None:
        release.set()
        await _position(gw, 501)

    _before_replay_read(gw, reader_gap)
    async with WsClient(gw.ws, token="full-token") as c:
        await c.hello([], lastSeqId=5)
        await c.until(lambda _: len(c.events()) == 501 - oldest + 1)
        await c.send({"type": "list_sessions"})
        await c.expect("sessions")  # a repeated gap would have arrived before this
    assert [(g["fromSeqId"], g["toSeqId"]) for g in c.of_type("gap_detected")] == [(6, oldest - 1)]
    assert [e["seqId"] for e in c.events()] == list(range(oldest, 502))
    assert gw.metric("relaybus_gateway_gaps_total", {"reason": "trimmed"}) == 1


async def test_buffered_entries_trimmed_from_the_log_are_not_in_the_gap(
    gw: RunningGateway, rclient: aioredis.Redis, keys: Keys
) -> None:
    """Entries the connection buffered live but the log lost to a trim before its replay read
    are delivered, and the gap names only what neither holds."""
    small = Publisher(rclient, keys, log_maxlen=100)
    await small.start_session("s1")
    for _ in range(10):
        await small.events("s1", [f"e{i}" for i in range(50)])
    await _position(gw, 501)

    async def trim_buffered() -> None:
        for _ in range(4):
            await small.events("s1", [f"f{i}" for i in range(50)])
        await _position(gw, 701)

    _before_replay_read(gw, trim_buffered)
    async with WsClient(gw.ws, token="full-token") as c:
        await c.hello([], lastSeqId=5)
        await c.until(lambda _: len(c.events()) == 200)
        await c.send({"type": "list_sessions"})
        await c.expect("sessions")
    assert await _oldest(rclient, keys) > 502
    assert [(g["fromSeqId"], g["toSeqId"]) for g in c.of_type("gap_detected")] == [(6, 501)]
    assert [e["seqId"] for e in c.events()] == list(range(502, 702))


async def test_replay_larger_than_the_byte_budget_arrives_whole(
    settings: Settings, pub: Publisher
) -> None:
    """A replay of ~6× the send budget reaches a reading client whole and in order: each page
    waits for room in the queue and the sender's drain wakes it (no event held idle)."""
    await pub.start_session("big")
    for i in range(0, 300, 10):
        await pub.events("big", [str(n) for n in range(i, i + 10)], data_bytes=1200)
    small = settings.model_copy(update={"send_buffer_bytes": 64 * 1024, "replay_depth": 5000})
    async with running_gateway(small) as g, WsClient(g.ws, token="full-token") as c:
        await c.hello(FULL)
        await c.send({"type": "watch_session", "sessionId": "big", "sinceSeqId": 0})
        got = await c.until(lambda fs: sum(f["type"] == "session_event" for f in fs) >= 300)
        events = [f for f in got if f["type"] == "session_event"]
        assert texts(events) == [str(n) for n in range(300)]
        assert [f for f in got if f["type"] == "error"] == []
