"""The atomic Lua append: contiguous seqIds, offset CAS, epoch check, trimming, expiry."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import cast

import orjson
import pytest
import redis.asyncio as aioredis

from relaybus.shared.store.appendlog import (
    AppendBatch,
    EpochChanged,
    LogAppender,
    OffsetConflict,
    OutEvent,
)
from relaybus.shared.store.connection import ensure_epoch
from relaybus.shared.store.keys import Keys
from relaybus.shared.wire import frames
from tests.support.collector_records import Entries
from tests.support.servers import RedisServer


def ev(text: str) -> OutEvent:
    prefix = frames.session_event(
        "s1", {"type": "user", "blocks": [{"kind": "text", "text": text}]}
    )
    return OutEvent(frames.SESSION_EVENT, prefix, session_stream=True, session_seq=True)


@pytest.fixture
async def client(each_server: RedisServer) -> AsyncIterator[aioredis.Redis]:
    c = aioredis.Redis.from_url(each_server.url)
    yield c
    await c.aclose()


def appender(client: aioredis.Redis, keys: Keys, **kw: int) -> LogAppender:
    limits = {"log_maxlen": 1000, "session_maxlen": 100, "session_ttl_s": 3600} | kw
    return LogAppender(client, keys, "h1", **limits)


async def test_batch_gets_contiguous_seq_and_session_seq(
    client: aioredis.Redis, keys: Keys
) -> None:
    """Each event gets the next seq; session events also a contiguous sessionSeq spliced into the frame."""
    epoch = await ensure_epoch(client, keys)
    app = appender(client, keys)
    turn = OutEvent(frames.TURN_STATUS, frames.turn_status("s1", state="working", since=1))
    batch = AppendBatch("s1", [ev("a"), turn, ev("b")], "f.jsonl", "", "10:1:2", activity_ms=5)
    res = await app.append(batch, epoch=epoch, stamp_ms=7)
    assert (res.first_seq, res.last_seq, res.last_session_seq, res.gen) == (1, 3, 2, 0)
    log = cast(Entries, await client.xrange(keys.log))
    assert [e[0] for e in log] == [b"1-0", b"2-0", b"3-0"]
    frames_ = [orjson.loads(e[1][b"f"]) for e in log]
    assert [f.get("sessionSeq") for f in frames_] == [1, None, 2]
    assert [f["seqId"] for f in frames_] == [1, 2, 3]
    assert log[0][1][b"s"] == b"s1" and log[0][1][b"t"] == b"7"
    sess = cast(Entries, await client.xrange(keys.session_events("s1")))
    assert [e[0] for e in sess] == [b"1-0", b"3-0"]
    assert await client.hget(keys.offsets("h1"), "f.jsonl") == b"10:1:2"
    assert await client.hget(keys.session("s1"), "lastSeqId") == b"3"
    assert await client.zscore(keys.sessions, "s1") == 5


async def test_offset_mismatch_writes_nothing(client: aioredis.Redis, keys: Keys) -> None:
    """A batch that does not start at the committed offset is refused before any write."""
    epoch = await ensure_epoch(client, keys)
    app = appender(client, keys)
    await app.append(AppendBatch("s1", [ev("a")], "f", "", "10:1:2"), epoch=epoch, stamp_ms=1)
    with pytest.raises(OffsetConflict) as info:
        await app.append(AppendBatch("s1", [ev("b")], "f", "", "20:1:2"), epoch=epoch, stamp_ms=1)
    assert info.value.committed == "10:1:2"
    assert await client.xlen(keys.log) == 1
    assert await client.get(keys.seq) == b"1"


async def test_append_tells_the_rewind_generation_it_ran_under(
    client: aioredis.Redis, keys: Keys
) -> None:
    """A collector records a lost append's rewind against the generation it was appended in."""
    epoch = await ensure_epoch(client, keys)
    await client.hset(keys.rewinds, mapping={"gen": 2, "2": 40})
    res = await appender(client, keys).append(AppendBatch("s1", [ev("a")]), epoch=epoch, stamp_ms=1)
    assert (res.first_seq, res.gen) == (1, 2)


async def test_epoch_mismatch_after_data_loss(client: aioredis.Redis, keys: Keys) -> None:
    """After the epoch key vanishes the script refuses, so a stale appender cannot write."""
    epoch = await ensure_epoch(client, keys)
    await client.delete(keys.epoch)
    with pytest.raises(EpochChanged):
        await appender(client, keys).append(AppendBatch("s1", [ev("a")]), epoch=epoch, stamp_ms=1)
    assert await client.exists(keys.log) == 0


async def test_trimming_and_ttl(client: aioredis.Redis, keys: Keys) -> None:
    """Streams are trimmed by count; the session stream and hash expire after inactivity."""
    epoch = await ensure_epoch(client, keys)
    app = appender(client, keys, log_maxlen=100, session_maxlen=10, session_ttl_s=50)
    for _ in range(30):
        await app.append(
            AppendBatch("s1", [ev(str(i)) for i in range(20)]), epoch=epoch, stamp_ms=1
        )
    assert await client.get(keys.seq) == b"600"
    assert 100 <= await client.xlen(keys.log) < 600
    assert 10 <= await client.xlen(keys.session_events("s1")) < 600
    last = cast(Entries, await client.xrevrange(keys.log, count=1))
    assert last[0][0] == b"600-0"
    assert 0 < await client.ttl(keys.session_events("s1")) <= 50
    assert 0 < await client.ttl(keys.session("s1")) <= 50


async def test_hash_updates_and_ttl_without_events(client: aioredis.Redis, keys: Keys) -> None:
    """Hash updates alone are written (with the TTL) and set no lastSeqId; a session with
    no stream gets none from the TTL."""
    epoch = await ensure_epoch(client, keys)
    app = appender(client, keys, session_ttl_s=50)
    updates = {"title": "T ü", "live": "1", "cwd": ""}
    await app.append(AppendBatch("s1", [], hash_updates=updates), epoch=epoch, stamp_ms=1)
    assert await client.hgetall(keys.session("s1")) == {
        b"title": "T ü".encode(),
        b"live": b"1",
        b"cwd": b"",
    }
    assert 0 < await client.ttl(keys.session("s1")) <= 50
    assert not await client.exists(keys.session_events("s1"))
    await app.append(
        AppendBatch("s1", [ev("a")], hash_updates={"live": "0"}), epoch=epoch, stamp_ms=1
    )
    h = await client.hgetall(keys.session("s1"))
    assert (h[b"live"], h[b"lastSeqId"], h[b"sessionSeq"], h[b"title"]) == (
        b"0",
        b"1",
        b"1",
        "T ü".encode(),
    )


async def test_sessions_index_pruned_once_a_minute_of_activity(
    client: aioredis.Redis, keys: Keys
) -> None:
    """Members older than the TTL leave the index at the first batch of each new minute of
    activity (by score), not at every batch; the newest member stays."""
    epoch = await ensure_epoch(client, keys)
    app = appender(client, keys, session_ttl_s=3600)
    minute, ttl_ms = 60_000, 3_600_000
    t0 = 1_000 * minute

    async def touch(sid: str, at: int) -> None:
        await app.append(AppendBatch(sid, [ev("x")], activity_ms=at), epoch=epoch, stamp_ms=1)

    await touch("old", t0)
    await touch("mid", t0 + 30 * minute)
    now = t0 + ttl_ms + 10 * minute + 1_000
    await touch("new", now)  # a new minute: "old" is past its TTL
    assert await client.zscore(keys.sessions, "old") is None
    await touch("stale", now - ttl_ms - 1)  # e.g. an old transcript's history
    await touch("new", now + 1_000)  # the same minute: no prune
    assert await client.zscore(keys.sessions, "stale") is not None
    await touch("new", now + minute)  # the next minute
    assert await client.zscore(keys.sessions, "stale") is None
    assert await client.zscore(keys.sessions, "mid") == t0 + 30 * minute
    assert await client.zscore(keys.sessions, "new") == now + minute
