"""A reconnect storm reads each replay page once (counted by Redis itself), and every client
still gets every event once, in order, whatever is written meanwhile; which callers a shared
read may serve."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import pytest
import redis.asyncio as aioredis
from prometheus_client import CollectorRegistry

from relaybus.gateway.delivery import history
from relaybus.gateway.delivery.fanout import Hub
from relaybus.gateway.delivery.history import Page
from relaybus.gateway.delivery.shared_pages import SharedPages, SharedReads
from relaybus.gateway.metrics import GatewayMetrics
from relaybus.shared.store.keys import Keys
from tests.conftest import make_settings
from tests.support.gateway_client import WsClient
from tests.support.gateway_publish import Publisher
from tests.support.gateway_server import running_gateway
from tests.support.servers import RedisServer

CLIENTS = 40
#: Three pages of the log and of the session stream.
MISSED = 2 * history.PAGE + 88


@pytest.fixture
async def own(
    private_server: Callable[..., RedisServer],
) -> AsyncIterator[tuple[RedisServer, aioredis.Redis]]:
    """A server of this test alone: its command counts are this test's."""
    srv = private_server()
    client = aioredis.Redis.from_url(srv.url)
    yield srv, client
    await client.aclose()


async def xrange_calls(client: aioredis.Redis) -> int:
    stats = await client.info("commandstats")
    return int(stats.get("cmdstat_xrange", {}).get("calls", 0))


async def resume(url: str, last: int) -> WsClient:
    c = await WsClient(url, token="full-token").__aenter__()
    await c.hello(["session_subscriptions"], lastSeqId=last)
    await c.send({"type": "watch_session", "sessionId": "s1", "sinceSeqId": last})
    return c


def assert_exact(c: WsClient, first: int, last: int) -> None:
    evs = c.events()
    assert [e["seqId"] for e in evs] == list(range(first, last + 1))
    assert not c.of_type("gap_detected")


async def test_storm_reads_each_page_once(
    own: tuple[RedisServer, aioredis.Redis], namespace: str, keys: Keys
) -> None:
    """40 clients resuming from one point cost one read per page, not one per client."""
    srv, client = own
    pub = Publisher(client, keys)
    await pub.start_session("s1")
    cut = await pub.events("s1", ["0"])
    for i in range(0, MISSED, 50):
        await pub.events("s1", [str(j) for j in range(i, min(i + 50, MISSED))])
    async with running_gateway(make_settings(srv.url, namespace)) as g:
        before = await xrange_calls(client)
        clients = await asyncio.gather(*(resume(g.ws, cut.last_seq) for _ in range(CLIENTS)))
        try:
            for c in clients:
                await c.until(lambda _: c.n_events >= MISSED, 30)  # noqa: B023  # awaited before the loop moves on
                await c.send({"type": "list_sessions"})
                await c.expect("sessions")  # anything duplicated would have arrived before it
            reads = await xrange_calls(client) - before
        finally:
            for c in clients:
                await c.__aexit__(None, None, None)
    for c in clients:
        assert_exact(c, cut.last_seq + 1, cut.last_seq + MISSED)
    # Unshared: per client 4 log reads (head probe + 3 pages) and 3 session pages (+ the
    # session head's first entry): 8 x 40 = 320. Shared: 3 + 3 pages, and a session head
    # per second the clients took to arrive (a head read serves later watches for 1 s).
    assert reads <= 2 * 3 + 10, reads


async def test_storm_with_live_writes_is_exact(
    own: tuple[RedisServer, aioredis.Redis], namespace: str, keys: Keys
) -> None:
    """Clients resuming while the writer appends get every event once, in order (shared pages
    read before a client subscribed never stand in for what it must read itself)."""
    srv, client = own
    pub = Publisher(client, keys)
    await pub.start_session("s1")
    cut = await pub.events("s1", ["0"])
    await pub.events("s1", [str(i) for i in range(300)])
    total = 300 + 200

    async def writer() -> None:
        for i in range(300, total):
            await pub.events("s1", [str(i)])
            if i % 20 == 0:
                await asyncio.sleep(0.005)

    async with running_gateway(make_settings(srv.url, namespace)) as g:
        task = asyncio.create_task(writer())
        clients = []
        for _ in range(CLIENTS // 4):
            clients += await asyncio.gather(*(resume(g.ws, cut.last_seq) for _ in range(4)))
            await asyncio.sleep(0.01)
        await task
        try:
            for c in clients:
                await c.until(lambda _: c.n_events >= total, 30)  # noqa: B023  # awaited before the loop moves on
                await c.send({"type": "list_sessions"})
                await c.expect("sessions")
        finally:
            for c in clients:
                await c.__aexit__(None, None, None)
    for c in clients:
        assert_exact(c, cut.last_seq + 1, cut.last_seq + total)


class Counted:
    """``history.read_page`` on the real server, counting the reads it was asked for."""

    def __init__(self, client: aioredis.Redis, keys: Keys) -> None:
        self.client, self.keys = client, keys
        self.calls: list[int] = []

    async def __call__(self, stream: str, after: int) -> Page:
        self.calls.append(after)
        return await history.read_page(self.client, self.keys, stream, after)


async def test_nearby_points_share_and_stale_reads_are_not_reused(
    own: tuple[RedisServer, aioredis.Redis], keys: Keys
) -> None:
    _srv, client = own
    pub = Publisher(client, keys)
    await pub.start_session("s1")
    await pub.events("s1", [str(i) for i in range(history.PAGE + 10)])
    hub = Hub(GatewayMetrics(CollectorRegistry()))
    hub.position = 5
    fetch = Counted(client, keys)
    pages = SharedPages(hub, fetch)

    first, near = await asyncio.gather(pages.page(keys.log, 0, 5), pages.page(keys.log, 3, 5))
    assert fetch.calls == [0]  # the read from 0 covers the one from 3
    assert [e.seq for e in first.events] == list(range(1, history.PAGE + 1)) and first.more
    assert [e.seq for e in near.events] == list(range(4, history.PAGE + 1)) and near.more

    end = await pages.page(keys.log, history.PAGE, 5)  # short: the end of the log
    assert [e.seq for e in end.events] == list(range(history.PAGE + 1, history.PAGE + 12))
    assert not end.more and fetch.calls == [0, history.PAGE]
    await pub.events("s1", ["late"])
    # A connection that subscribed after the reader passed the short read's position needs
    # a read of its own (the cached one ends before what it buffers); a full page does not.
    hub.position = history.PAGE + 12
    late = await pages.page(keys.log, history.PAGE + 5, hub.position)
    assert [e.seq for e in late.events] == list(range(history.PAGE + 6, history.PAGE + 13))
    assert fetch.calls == [0, history.PAGE, history.PAGE + 5]
    await pages.page(keys.log, 100, hub.position)
    assert len(fetch.calls) == 3
    hub.pages_version += 1  # a rewind or an epoch change: nothing read before is reused
    await pages.page(keys.log, 100, hub.position)
    assert fetch.calls[-1] == 100 and len(fetch.calls) == 4


async def test_shared_reads_serve_only_callers_they_cover() -> None:
    """A head read serves concurrent callers that subscribed no later than it was issued,
    for its time to live; a higher floor, a new pages version or a failure means a new read."""
    hub = Hub(GatewayMetrics(CollectorRegistry()))
    hub.position = 10
    reads = SharedReads[int](hub, ttl_s=60.0)
    issued: list[int] = []

    async def read() -> int:
        issued.append(hub.position)
        await asyncio.sleep(0.01)
        if hub.position == 99:
            raise ConnectionError("refused")
        return hub.position

    assert await asyncio.gather(*(reads.get("s1", 10, read) for _ in range(5))) == [10] * 5
    assert await reads.get("s1", 7, read) == 10 and issued == [10]  # finished, still fresh
    hub.position = 12
    assert await reads.get("s1", 12, read) == 12 and issued == [10, 12]  # subscribed later
    hub.pages_version += 1
    assert await reads.get("s1", 0, read) == 12 and issued == [10, 12, 12]
    hub.position = 99
    with pytest.raises(ConnectionError):
        await reads.get("s2", 0, read)
    hub.position = 100
    assert await reads.get("s2", 0, read) == 100  # a failed read is not kept
