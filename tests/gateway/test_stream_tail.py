"""StreamTail on a real server: it starts at the stream's end, hands each entry once in order,
rides out a server that went away from where it was, hands an entry whose handler failed
again, and stops when cancelled in a blocked read."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import pytest
import redis.asyncio as aioredis

from relaybus.gateway.stream_tail import StreamTail
from relaybus.shared.aio import Backoff, cancel_and_wait
from tests.support.servers import RedisServer
from tests.support.wait import wait_for

STREAM = "tail:test"


class Seen:
    """A handler that records the ``n`` field of each entry (and fails on ``boom`` once)."""

    def __init__(self) -> None:
        self.values: list[str] = []
        self.fail_once = True

    async def __call__(self, _eid: str, fields: dict[bytes, bytes]) -> None:
        value = fields[b"n"].decode()
        if value == "boom" and self.fail_once:
            self.fail_once = False
            raise RuntimeError("handler failed")
        self.values.append(value)


def tail_of(client: aioredis.Redis) -> StreamTail:
    return StreamTail(client, STREAM, what="test stream", block_ms=200, backoff=Backoff(0.02, 0.1))


async def test_starts_at_the_end_and_hands_each_new_entry_in_order(
    private_server: Callable[..., RedisServer],
) -> None:
    """Entries written before the tail started are not handed; later ones are, once, in order."""
    srv = private_server()
    client = aioredis.Redis.from_url(srv.url)
    await client.xadd(STREAM, {"n": "old"})
    tail, seen = tail_of(client), Seen()
    task = asyncio.create_task(tail.follow(seen))
    await asyncio.wait_for(tail.ready.wait(), 5)
    for n in ("a", "b", "c"):
        await client.xadd(STREAM, {"n": n})
    await wait_for(lambda: len(seen.values) >= 3 or None, timeout_s=5)
    assert seen.values == ["a", "b", "c"]
    await cancel_and_wait(task)  # ends in a blocked XREAD
    assert task.cancelled()
    await client.aclose()


async def test_rides_out_an_outage_from_the_last_entry(
    private_server: Callable[..., RedisServer], caplog: pytest.LogCaptureFixture
) -> None:
    """With the server killed and back (data kept), entries written meanwhile are handed and
    the outage is logged as a warning."""
    srv = private_server(appendonly=True)
    client = aioredis.Redis.from_url(srv.url, socket_timeout=2)
    tail, seen = tail_of(client), Seen()
    task = asyncio.create_task(tail.follow(seen))
    await asyncio.wait_for(tail.ready.wait(), 5)
    await client.xadd(STREAM, {"n": "before"})
    await wait_for(lambda: seen.values or None, timeout_s=5)
    with caplog.at_level(logging.WARNING):
        srv.stop()
        await wait_for(lambda: "test stream unavailable" in caplog.text or None, timeout_s=5)
        srv.start()
        writer = aioredis.Redis.from_url(srv.url)
        await writer.xadd(STREAM, {"n": "after"})
        await wait_for(lambda: len(seen.values) >= 2 or None, timeout_s=10)
    assert seen.values == ["before", "after"]
    await cancel_and_wait(task)
    await client.aclose()
    await writer.aclose()


async def test_a_failed_handler_gets_the_entry_again(
    private_server: Callable[..., RedisServer],
) -> None:
    """A handler's error ends follow() and leaves the position before that entry: the next
    follow() (the supervisor's restart) hands it again, then goes on."""
    srv = private_server()
    client = aioredis.Redis.from_url(srv.url)
    tail, seen = tail_of(client), Seen()
    task = asyncio.create_task(tail.follow(seen))
    await asyncio.wait_for(tail.ready.wait(), 5)
    for n in ("a", "boom", "c"):
        await client.xadd(STREAM, {"n": n})
    with pytest.raises(RuntimeError, match="handler failed"):
        await asyncio.wait_for(task, 5)
    assert seen.values == ["a"]
    task = asyncio.create_task(tail.follow(seen))
    await wait_for(lambda: len(seen.values) >= 3 or None, timeout_s=5)
    assert seen.values == ["a", "boom", "c"]
    await cancel_and_wait(task)
    await client.aclose()
