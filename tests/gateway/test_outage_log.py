"""A Redis outage is logged once per loop, not once per retry (docs/configuration.md: an
unreachable Redis is logged once): a WARNING when it starts, DEBUG for each retry, an INFO
with its length when it ends. Real server stopped and started under an in-process gateway."""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable

import pytest
import redis.asyncio as aioredis

from relaybus.shared.store.keys import Keys
from tests.conftest import make_settings
from tests.support.gateway_client import WsClient
from tests.support.gateway_publish import Publisher
from tests.support.gateway_server import running_gateway
from tests.support.servers import RedisServer
from tests.support.wait import wait_for

#: Every gateway loop that rides out an outage, as its log lines name it.
LOOPS = (
    "Redis (log reader)",
    "reply stream",
    "revocation stream",
    "Redis (watcher counts)",
    "Redis (push holds)",
    "Redis (push notifier)",
)


def lines(caplog: pytest.LogCaptureFixture, loop: str, level: int) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno == level and r.getMessage().startswith(f"{loop} ")
    ]


async def test_each_loop_logs_an_outage_once_when_it_starts_and_once_when_it_ends(
    private_server: Callable[..., RedisServer], namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    srv = private_server(appendonly=True)
    # watchers_ttl_s=3: the watcher counts are re-stamped (a Redis write) every second.
    settings = make_settings(srv.url, namespace, watchers_ttl_s=3)
    rclient = aioredis.Redis.from_url(srv.url)
    await Publisher(rclient, Keys(namespace)).start_session("s1")
    await rclient.aclose()
    async with running_gateway(settings) as g, WsClient(g.ws, token="full-token") as client:
        await client.hello(["session_subscriptions"])
        await client.watch("s1")
        caplog.set_level(logging.DEBUG, logger="relaybus")
        caplog.clear()
        srv.stop()
        # Every loop has failed at least twice: its retries are at DEBUG.
        await wait_for(
            lambda: all(lines(caplog, loop, logging.DEBUG) for loop in LOOPS) or None,
            timeout_s=30,
            what="a retry of every loop",
        )
        warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
        srv.start()
        await wait_for(
            lambda: all(lines(caplog, loop, logging.INFO) for loop in LOOPS) or None,
            timeout_s=30,
            what="every loop back",
        )
        await asyncio.sleep(0.5)  # a second WARNING or INFO of a loop would show by now
    # The only warnings of the outage are the six starts, each with its reason.
    assert len(warnings) == len(LOOPS), warnings
    for loop in LOOPS:
        (start,) = lines(caplog, loop, logging.WARNING)
        assert re.fullmatch(
            rf"{re.escape(loop)} unavailable \(\w+Error: .+\); retrying in .+", start
        )
        (end,) = lines(caplog, loop, logging.INFO)
        found = re.fullmatch(
            rf"{re.escape(loop)} available again after ([\d.]+) s \(attempts failed: (\d+)\)", end
        )
        assert found, end
        assert float(found[1]) > 0
        assert int(found[2]) == 1 + len(lines(caplog, loop, logging.DEBUG))
