"""The Redis client the collector and the gateway share (``shared.redis_conn.connect``)."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from typing import cast

import redis.asyncio as aioredis

from relaybus.shared.store.connection import connect
from tests.conftest import BINARIES, DEFAULT_KIND, make_settings
from tests.support.servers import RedisServer

#: redis-py's default pool size (more concurrent commands than it has connections).
POOL = 100


async def test_commands_beyond_the_pool_size_wait_instead_of_failing(
    server: RedisServer, namespace: str
) -> None:
    """A reconnect storm runs hundreds of reads at once: the commands past the pool's
    connections wait for one to be free, none fails with "Too many connections"."""
    client = connect(make_settings(server.url, namespace))
    other = aioredis.Redis.from_url(server.url)
    key = f"{namespace}:queue"
    n = POOL + 30
    try:
        pops = [asyncio.ensure_future(client.blpop([key], timeout=5)) for _ in range(n)]
        await asyncio.sleep(0.3)  # the first POOL hold every connection, blocked in Redis
        assert not any(t.done() for t in pops)
        await other.rpush(key, *range(n))
        # all n were pushed: none of the BLPOPs times out (nil), each answers [key, value]
        got = cast(list[tuple[bytes, bytes]], await asyncio.gather(*pops))
        assert sorted(int(v) for _k, v in got) == list(range(n))
    finally:
        await client.aclose()
        await other.aclose()


async def test_a_unix_socket_url_connects(namespace: str) -> None:
    """RELAYBUS_REDIS_URL=unix:///…: the shared client connects and appends (TCP keepalive is
    a TCP option; passed to a Unix socket it failed every connect)."""
    workdir = Path(tempfile.mkdtemp(prefix="rb-unix-", dir="/tmp"))  # socket paths: < 108 bytes
    srv = RedisServer(DEFAULT_KIND, BINARIES[DEFAULT_KIND], workdir, unixsocket=workdir / "r.sock")
    srv.start()
    client = connect(make_settings(f"unix://{workdir / 'r.sock'}?db=0", namespace))
    try:
        assert await client.ping()
        await client.xadd(f"{namespace}:s", {"k": "v"})
        assert await client.xlen(f"{namespace}:s") == 1
    finally:
        await client.aclose()
        srv.stop()
