"""Each gateway's per-session watcher count in Redis: what the collector asks before holding."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping

import redis.asyncio as aioredis

from relaybus.shared.store.keys import Keys
from relaybus.shared.wire import approvals as ap
from tests.conftest import make_settings
from tests.support.gateway_client import FULL, WsClient
from tests.support.gateway_publish import Publisher
from tests.support.gateway_server import running_gateway
from tests.support.servers import RedisServer
from tests.support.wait import wait_for


def _count(fields: Mapping[bytes | str, bytes | str]) -> int:
    return ap.live_watchers(fields, int(time.time() * 1000))


async def test_counts_follow_watch_unwatch_and_disconnect(
    server: RedisServer, namespace: str, keys: Keys, admin: aioredis.Redis
) -> None:
    """Full-access watchers count (read-only ones do not); unwatch and disconnect take them off;
    a stopped gateway removes its field."""
    pub = Publisher(admin, keys)
    await pub.start_session("s1")
    key = keys.session_watchers("s1")
    async with running_gateway(make_settings(server.url, namespace)) as gw:
        gid = gw.runtime.gateway_id.encode()
        async with (
            WsClient(gw.ws, token="full-token") as a,
            WsClient(gw.ws, token="ro-token") as ro,
        ):
            for ws in (a, ro):
                await ws.hello(FULL)
                await ws.watch("s1")
            assert _count(await admin.hgetall(key)) == 1
            async with WsClient(gw.ws, token="full-token") as b:
                await b.hello(FULL)
                await b.watch("s1")
                assert _count(await admin.hgetall(key)) == 2
            # b disconnected without unwatching: the periodic pass notices

            async def one_left() -> bool:
                return _count(await admin.hgetall(key)) == 1

            await wait_for(one_left, timeout_s=30, what="the disconnect to be counted")
            assert 0 < await admin.ttl(key) <= ap.WATCHERS_TTL_S
            await a.send({"type": "unwatch_session", "sessionId": "s1"})
            await a.expect("watch_ack")
            assert gid not in await admin.hgetall(key)
            await a.watch("s1")
            assert _count(await admin.hgetall(key)) == 1
    assert await admin.hgetall(key) == {}


async def test_watches_arriving_together_are_all_counted_before_their_acks(
    server: RedisServer, namespace: str, keys: Keys, admin: aioredis.Redis
) -> None:
    """Concurrent watches share count writes (a reconnect storm), yet once every one has its
    ack, Redis counts every watcher: each ack waits for a write that started after its watch."""
    pub = Publisher(admin, keys)
    await pub.start_session("s1")
    key = keys.session_watchers("s1")

    async def watch(url: str) -> WsClient:
        ws = await WsClient(url, token="full-token").__aenter__()
        await ws.hello(FULL)
        await ws.watch("s1")
        return ws

    async with running_gateway(make_settings(server.url, namespace)) as gw:
        clients = await asyncio.gather(*(watch(gw.ws) for _ in range(20)))
        try:
            assert _count(await admin.hgetall(key)) == 20
        finally:
            for ws in clients:
                await ws.__aexit__(None, None, None)
