"""The gateway's background tasks are supervised: a crash is logged, counted and restarted."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import httpx
import pytest
import redis.asyncio as aioredis

from relaybus.shared.settings import Settings
from relaybus.shared.store.keys import Keys
from tests.support.gateway_client import WsClient
from tests.support.gateway_publish import Publisher
from tests.support.gateway_server import RunningGateway, running_gateway

CRASHES = "relaybus_gateway_task_crashes_total"


async def wait_for(pred: Callable[[], object], wait_s: float = 20.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait_s
    while not pred():
        if loop.time() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.05)


async def readyz(g: RunningGateway) -> int:
    async with httpx.AsyncClient(base_url=g.http) as http:
        return (await http.get("/readyz", timeout=10)).status_code


async def test_log_reader_crash_is_restarted_and_readyz_follows(
    settings: Settings,
    rclient: aioredis.Redis,
    keys: Keys,
    pub: Publisher,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A log reader that raises an unexpected error is logged, counted and restarted with
    backoff; /readyz answers 503 while it is down and 200 once it reads again, and events
    published afterwards reach a connected client."""
    await pub.start_session("s1")
    async with running_gateway(settings) as g, WsClient(g.ws, token="full-token") as client:
        await client.hello(["session_subscriptions"])
        await client.watch("s1")
        assert await readyz(g) == 200
        epoch = await rclient.get(keys.epoch)
        assert epoch is not None
        caplog.set_level(logging.ERROR, logger="relaybus.shared.aio")
        # Bytes that are not UTF-8: decoding the epoch raises in the reader (not a Redis error).
        await rclient.set(keys.epoch, b"\xff\xfe")
        await wait_for(lambda: g.metric(CRASHES, {"task": "log-reader"}) >= 2)
        assert await readyz(g) == 503
        assert any(
            r.getMessage().startswith("task log-reader crashed; restarting in ")
            and r.exc_info is not None
            and r.exc_info[0] is UnicodeDecodeError
            for r in caplog.records
        )
        await rclient.set(keys.epoch, epoch)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 20
        while await readyz(g) != 200:
            assert loop.time() < deadline, "the restarted reader never became ready"
            await asyncio.sleep(0.1)
        await pub.events("s1", ["after the crash"])
        frames = await client.until(lambda fs: any(f["type"] == "session_event" for f in fs))
        (event,) = [f for f in frames if f["type"] == "session_event"]
        assert event["event"]["blocks"][0]["text"] == "after the crash"
        assert g.metric(CRASHES, {"task": "command-replies"}) == 0


async def test_a_crashing_push_job_is_counted_restarted_and_seen_by_readyz(
    settings: Settings, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Push's notifier is a supervised runtime task: an unexpected error in it is logged,
    counted as push-notify and restarted; /readyz answers 503 while it is down and 200 once it
    runs again."""
    async with running_gateway(settings) as g:
        notifier = g.runtime.push.notifier
        await wait_for(notifier.healthy)
        assert await readyz(g) == 200
        caplog.set_level(logging.ERROR, logger="relaybus.shared.aio")

        async def broken() -> bool:
            raise RuntimeError("injected push fault")

        healthy_active = notifier._active
        monkeypatch.setattr(notifier, "_active", broken)
        await wait_for(lambda: g.metric(CRASHES, {"task": "push-notify"}) >= 2)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 20
        while await readyz(g) != 503:
            assert loop.time() < deadline, "/readyz never saw the crashed push job"
            await asyncio.sleep(0.05)
        assert any(
            r.getMessage().startswith("task push-notify crashed; restarting in ")
            for r in caplog.records
        )
        monkeypatch.setattr(notifier, "_active", healthy_active)
        deadline = loop.time() + 20
        while await readyz(g) != 200:
            assert loop.time() < deadline, "the restarted push job never became ready"
            await asyncio.sleep(0.1)
        assert notifier.healthy()
        assert g.metric(CRASHES, {"task": "push-holds"}) == 0
