"""The appends' own connection: dropped, killed, abandoned mid-append, or facing a server
that forgot the script; each batch is appended once or refused, never taken for another."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import pytest
import redis.asyncio as aioredis
import redis.exceptions

from relaybus.shared.store.appendlog import AppendBatch, LogAppender, OffsetConflict, OutEvent
from relaybus.shared.store.connection import Connects, connect, ensure_epoch
from relaybus.shared.store.keys import Keys
from relaybus.shared.wire import frames
from tests.conftest import make_settings
from tests.support.servers import RedisServer


def ev(text: str) -> OutEvent:
    prefix = frames.session_event(
        "s1", {"type": "user", "blocks": [{"kind": "text", "text": text}]}
    )
    return OutEvent(frames.SESSION_EVENT, prefix, session_stream=True, session_seq=True)


def batch(text: str, expected: str, new: str) -> AppendBatch:
    return AppendBatch("s1", [ev(text)], "f.jsonl", expected, new)


def appender(client: aioredis.Redis, keys: Keys, **kw: int) -> LogAppender:
    return LogAppender(
        client, keys, "h1", log_maxlen=1000, session_maxlen=100, session_ttl_s=3600, **kw
    )


@pytest.fixture
async def client(server: RedisServer) -> AsyncIterator[aioredis.Redis]:
    c = aioredis.Redis.from_url(server.url)
    yield c
    await c.aclose()


async def kill_appender(client: aioredis.Redis) -> None:
    """CLIENT KILL the connection whose last command was the append's EVALSHA."""
    ids = [c["id"] for c in await client.client_list() if c["cmd"] == "evalsha"]
    assert len(ids) == 1
    await client.client_kill_filter(_id=ids[0])


async def test_connection_dropped_while_idle_is_opened_again(
    server: RedisServer, namespace: str, keys: Keys
) -> None:
    """The server drops the idle append connection (CLIENT KILL, as its idle timeout or a
    restart would): the next append connects again (counted) and runs, once."""
    connects = Connects()
    client = connect(make_settings(server.url, namespace), connects=connects)
    try:
        epoch = await ensure_epoch(client, keys)
        app = appender(client, keys)
        await app.append(batch("a", "", "1:1:1"), epoch=epoch, stamp_ms=1)
        opened = connects.opened
        await kill_appender(client)
        done = await app.append(batch("b", "1:1:1", "2:1:1"), epoch=epoch, stamp_ms=1)
        assert (done.first_seq, done.last_seq, connects.opened > opened) == (2, 2, True)
        assert await client.xlen(keys.log) == 2
    finally:
        await client.aclose()


async def test_abandoned_reply_is_never_read_as_the_next_ones(
    client: aioredis.Redis, keys: Keys
) -> None:
    """A batch sent and given up on (its caller failed) ran; the next request must get its
    own reply (here: the offset the abandoned one committed), not the abandoned success."""
    epoch = await ensure_epoch(client, keys)
    app = appender(client, keys)
    await app.append(batch("a", "", "1:1:1"), epoch=epoch, stamp_ms=1)  # the script is loaded
    sent = await app.send(batch("b", "1:1:1", "2:1:1"), epoch=epoch, stamp_ms=1)
    # Given up once it ran, its reply unread (on a loaded machine the request could still
    # be unread when the connection closes: then it never runs and nothing is tested).
    for _ in range(500):
        if await client.hget(keys.offsets("h1"), "f.jsonl") == b"2:1:1":
            break
        await asyncio.sleep(0.01)
    app.abandon(sent)
    with pytest.raises(OffsetConflict) as info:
        await app.append(batch("b", "1:1:1", "2:1:1"), epoch=epoch, stamp_ms=1)
    assert info.value.committed == "2:1:1"
    assert await client.xlen(keys.log) == 2


@pytest.mark.parametrize("wait_replicas", [0, 1])
async def test_script_flushed_is_loaded_again(
    client: aioredis.Redis, keys: Keys, wait_replicas: int
) -> None:
    """NOSCRIPT (a restarted or promoted server) loads the script and runs the batch once,
    with and without the pipelined WAIT (whose reply must be read all the same)."""
    epoch = await ensure_epoch(client, keys)
    app = appender(client, keys, wait_replicas=wait_replicas, wait_timeout_ms=10)
    await app.append(batch("a", "", "1:1:1"), epoch=epoch, stamp_ms=1)
    await client.script_flush()
    done = await app.append(batch("b", "1:1:1", "2:1:1"), epoch=epoch, stamp_ms=1)
    assert done.first_seq == 2
    assert done.replicas == (0 if wait_replicas else None)
    done = await app.append(batch("c", "2:1:1", "3:1:1"), epoch=epoch, stamp_ms=1)
    assert done.first_seq == 3
    assert await client.xlen(keys.log) == 3


async def test_server_killed_mid_append_then_restarted(
    private_server: Callable[..., RedisServer], namespace: str, keys: Keys
) -> None:
    """Redis SIGKILLed with an append's reply outstanding (the server paused, so the batch
    surely did not run): the read fails; once the server is back the appender reconnects
    (counted, so the collector compares its offsets) and the batch runs once."""
    srv = private_server(appendonly=True)
    connects = Connects()
    client = connect(make_settings(srv.url, namespace), connects=connects)
    pauser = srv.client()
    try:
        epoch = await ensure_epoch(client, keys)
        app = appender(client, keys)
        await app.append(batch("a", "", "1:1:1"), epoch=epoch, stamp_ms=1)
        opened = connects.opened
        pauser.client_pause(10_000)
        sent = await app.send(batch("b", "1:1:1", "2:1:1"), epoch=epoch, stamp_ms=1)
        srv.stop()
        with pytest.raises(redis.exceptions.ConnectionError):
            await app.result(sent)
        srv.start()
        done = await app.append(batch("b", "1:1:1", "2:1:1"), epoch=epoch, stamp_ms=1)
        assert (done.first_seq, connects.opened > opened) == (2, True)
        with pytest.raises(OffsetConflict):  # and the same batch again is refused
            await app.append(batch("b", "1:1:1", "2:1:1"), epoch=epoch, stamp_ms=1)
        assert await client.xlen(keys.log) == 2
    finally:
        pauser.close()
        await client.aclose()


async def test_concurrent_appends_take_turns(client: aioredis.Redis, keys: Keys) -> None:
    """Appends from several tasks at once each get their own reply, in the order sent."""
    epoch = await ensure_epoch(client, keys)
    app = appender(client, keys)
    plain = [AppendBatch("s1", [ev(f"e{i}")]) for i in range(20)]
    done = await asyncio.gather(*(app.append(b, epoch=epoch, stamp_ms=1) for b in plain))
    assert sorted(d.first_seq for d in done) == list(range(1, 21))
    assert await client.xlen(keys.log) == 20
