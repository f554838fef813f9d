"""The command consumer rides out a Redis that refuses writes — READONLY (a primary turned
replica by a failover) or OOM — with backoff and a log line, and serves once it accepts them."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable
from typing import cast

import pytest
import redis
from prometheus_client import CollectorRegistry

from relaybus.collector.commands import CommandConsumer
from relaybus.collector.metrics import CollectorMetrics
from relaybus.shared.aio import now_ms
from relaybus.shared.store.command_streams import ensure_group
from relaybus.shared.store.connection import connect
from relaybus.shared.store.keys import Keys
from relaybus.shared.wire.commands import Command, Reply
from relaybus.shared.wire.errors import ErrorCode
from tests.conftest import make_settings
from tests.support.collector_records import Entries
from tests.support.servers import RedisServer
from tests.support.wait import wait_for


async def refused_then_served(
    srv: RedisServer,
    namespace: str,
    caplog: pytest.LogCaptureFixture,
    error: str,
    accept_writes: Callable[[redis.Redis], object],
) -> None:
    """Run a consumer on ``srv`` (refusing writes) until it logged ``error`` and kept going;
    then ``accept_writes`` and check a command is answered."""
    settings = make_settings(srv.url, namespace)
    client = connect(settings, block_ms=200)
    consumer = CommandConsumer(
        client, settings, {}, CollectorMetrics(CollectorRegistry()).commands, block_ms=200
    )
    stop = asyncio.Event()
    caplog.set_level(logging.WARNING, "relaybus.collector.commands")
    task = asyncio.create_task(consumer.run(stop))
    try:
        await wait_for(lambda: f"({error}:" in caplog.text, what=f"a retry after {error}")
        assert not task.done()  # retried, not crashed
        with redis.Redis(port=srv.port) as r:
            accept_writes(r)
        keys = Keys(namespace)
        cmd = Command(
            id=str(uuid.uuid4()),
            type="prompt",
            session_id="",
            gateway_id="gw",
            deadline_ms=now_ms() + 30_000,
            payload={},
        )
        await ensure_group(client, keys.cmd("testhost"))
        await client.xadd(keys.cmd("testhost"), cmd.fields())  # type: ignore[arg-type]  # redis-py: invariant dict of its EncodableT

        async def reply() -> Reply | None:
            entries = cast(Entries, await client.xrange(keys.reply("gw")))
            return Reply.from_fields(entries[0][1]) if entries else None

        answer = await wait_for(reply, what="the command answered")
        assert (answer.command_id, answer.code) == (cmd.id, ErrorCode.INVALID_MESSAGE)
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)
        await client.aclose()


async def test_readonly_replica_is_retried_until_promoted(
    private_server: Callable[..., RedisServer], namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    primary, replica = private_server(), private_server()
    with redis.Redis(port=replica.port) as r:
        r.replicaof("127.0.0.1", primary.port)
    await refused_then_served(
        replica, namespace, caplog, "ReadOnlyError", lambda r: r.replicaof("NO", "ONE")
    )


async def test_out_of_memory_is_retried_until_memory_is_freed(
    private_server: Callable[..., RedisServer], namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    srv = private_server()
    with redis.Redis(port=srv.port) as r:
        r.config_set("maxmemory-policy", "noeviction")
        r.config_set("maxmemory", 1)
    await refused_then_served(
        srv, namespace, caplog, "OutOfMemoryError", lambda r: r.config_set("maxmemory", 0)
    )
