"""The gateway's command router: checks before routing, the round trip, one answer per request."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import cast

import pytest
import redis.asyncio as aioredis
from prometheus_client import CollectorRegistry

from relaybus.collector.commands import CommandConsumer
from relaybus.collector.drivers.control import Controller
from relaybus.collector.metrics import CollectorMetrics
from relaybus.shared.settings import Settings
from relaybus.shared.store.connection import connect
from relaybus.shared.store.keys import Keys
from relaybus.shared.wire import commands as c
from tests.conftest import make_settings
from tests.support.collector_records import Entries
from tests.support.commands_env import RecordingHooks, texts
from tests.support.fake_claude import Transcript, transcript_path
from tests.support.gateway_client import WsClient
from tests.support.gateway_server import RunningGateway, running_gateway
from tests.support.servers import RedisServer
from tests.support.wait import wait_for


@pytest.fixture
async def admin(server: RedisServer, namespace: str) -> AsyncIterator[aioredis.Redis]:
    client = connect(make_settings(server.url, namespace))
    yield client
    await client.aclose()


@pytest.fixture
async def gw(server: RedisServer, namespace: str) -> AsyncIterator[RunningGateway]:
    settings = make_settings(server.url, namespace, command_timeout_seconds=2)
    async with running_gateway(settings) as g:
        yield g


@pytest.fixture
async def collector(
    server: RedisServer,
    namespace: str,
    claude_dir: Path,
    claude_bin: Path,
    admin: aioredis.Redis,
) -> AsyncIterator[Settings]:
    """An in-process consumer for host ``testhost`` (with its heartbeat key)."""
    settings = make_settings(
        server.url, namespace, claude_dir, allow_prompts=True, claude_bin=str(claude_bin)
    )
    await admin.set(Keys(namespace).host("testhost"), b'{"host":"testhost"}', ex=60)
    await admin.zadd(Keys(namespace).hosts, {"testhost": int(time.time() * 1000) + 60_000})
    client = connect(settings, block_ms=200)
    controller = Controller(settings, client, RecordingHooks())
    consumer = CommandConsumer(
        client,
        settings,
        dict.fromkeys(c.COMMAND_TYPES, controller.execute),
        CollectorMetrics(CollectorRegistry()).commands,
        block_ms=200,
    )
    stop = asyncio.Event()
    task = asyncio.create_task(consumer.run(stop))
    yield settings
    stop.set()
    await asyncio.wait_for(task, 10)
    await controller.aclose()
    await client.aclose()


async def _session(
    admin: aioredis.Redis, keys: Keys, cwd: Path, claude_dir: Path, host: str
) -> str:
    sid = str(uuid.uuid4())
    t = Transcript(transcript_path(claude_dir, str(cwd), sid), sid, str(cwd), "cli")
    t.user("first")
    t.reply("first")
    await admin.hset(keys.session(sid), mapping={"host": host, "cwd": str(cwd), "state": "idle"})
    return sid


async def test_prompt_round_trip_answers_prompt_sent(
    gw: RunningGateway,
    collector: Settings,
    admin: aioredis.Redis,
    keys: Keys,
    workdir: Path,
    claude_dir: Path,
) -> None:
    """A prompt reaches the host's consumer and the client gets prompt_sent with its ids."""
    sid = await _session(admin, keys, workdir, claude_dir, "testhost")
    async with WsClient(gw.ws, token="full-token") as ws:
        await ws.hello()
        await ws.send(
            {
                "type": "prompt",
                "requestId": "r-5",
                "traceId": "t-5",
                "sessionId": sid,
                "message": "go",
            }
        )
        sent = await ws.expect("prompt_sent")
    assert sent["requestId"] == "r-5" and sent["traceId"] == "t-5"
    assert sent["message"] == "go" and sent["sessionId"] == sid and isinstance(sent["seqId"], int)
    labels = {"type": "prompt", "outcome": "ok"}
    assert gw.metric("relaybus_gateway_commands_total", labels) == 1
    assert gw.metric("relaybus_gateway_command_round_trip_seconds_count") == 1
    path = transcript_path(claude_dir, str(workdir), sid)
    deadline = time.monotonic() + 30
    while "go" not in texts(path, "user"):
        assert time.monotonic() < deadline, "the prompt never ran"
        await asyncio.sleep(0.05)


async def test_read_only_token_is_forbidden(
    gw: RunningGateway, admin: aioredis.Redis, keys: Keys
) -> None:
    """Every command from a read-only token gets error{code:forbidden}."""
    async with WsClient(gw.ws, token="ro-token") as ws:
        await ws.hello()
        for frame in (
            {"type": "prompt", "requestId": "a", "sessionId": "s", "message": "x"},
            {"type": "interrupt_request", "requestId": "b", "sessionId": "s"},
            {"type": "new_conversation", "requestId": "c"},
        ):
            await ws.send(frame)
            err = await ws.expect("error")
            assert (err["code"], err["requestId"]) == ("forbidden", frame["requestId"])
    assert await admin.keys(f"{keys.prefix}cmd:*") == []
    assert (
        gw.metric("relaybus_gateway_commands_total", {"type": "prompt", "outcome": "forbidden"})
        == 1
    )


async def test_unknown_session(gw: RunningGateway) -> None:
    """A command for a session nobody knows is refused unknown_session (an interrupt: as its ack)."""
    async with WsClient(gw.ws, token="full-token") as ws:
        await ws.hello()
        await ws.send({"type": "prompt", "requestId": "p", "sessionId": "nope", "message": "x"})
        err = await ws.expect("error")
        await ws.send({"type": "interrupt_request", "requestId": "r", "sessionId": "nope"})
        ack = await ws.expect("interrupt_ack")
    assert (err["code"], err["requestId"]) == ("unknown_session", "p")
    assert (ack["ok"], ack["errorCode"], ack["requestId"]) == (False, "unknown_session", "r")


async def test_host_without_heartbeat_is_offline_at_once(
    gw: RunningGateway, admin: aioredis.Redis, keys: Keys, workdir: Path, claude_dir: Path
) -> None:
    """A session whose host has no heartbeat gets host_offline without waiting, and nothing is queued."""
    sid = await _session(admin, keys, workdir, claude_dir, "ghost")
    async with WsClient(gw.ws, token="full-token") as ws:
        await ws.hello()
        started = time.monotonic()
        await ws.send({"type": "prompt", "requestId": "r", "sessionId": sid, "message": "x"})
        err = await ws.expect("error")
        elapsed = time.monotonic() - started
    assert err["code"] == "host_offline"
    assert elapsed < 2, "host_offline must not wait for the command timeout"
    assert not await admin.exists(keys.cmd("ghost"))
    assert (
        gw.metric("relaybus_gateway_commands_total", {"type": "prompt", "outcome": "host_offline"})
        == 1
    )


async def test_silent_host_times_out(
    gw: RunningGateway, admin: aioredis.Redis, keys: Keys, workdir: Path, claude_dir: Path
) -> None:
    """A live heartbeat but no consumer: timeout after command_timeout_seconds (an interrupt's ack)."""
    sid = await _session(admin, keys, workdir, claude_dir, "mute")
    await admin.set(keys.host("mute"), b"{}", ex=60)
    async with WsClient(gw.ws, token="full-token") as ws:
        await ws.hello()
        await ws.send({"type": "interrupt_request", "requestId": "r", "sessionId": sid})
        ack = await ws.expect("interrupt_ack", wait_s=30)
    assert (ack["ok"], ack["errorCode"], ack["requestId"]) == (False, "timeout", "r")
    entries = cast(Entries, await admin.xrange(keys.cmd("mute")))
    assert len(entries) == 1 and entries[0][1][b"type"] == b"interrupt_request"


async def test_prompt_without_session_is_invalid(gw: RunningGateway) -> None:
    """A prompt must name its session; an empty message is refused too."""
    async with WsClient(gw.ws, token="full-token") as ws:
        await ws.hello()
        await ws.send({"type": "prompt", "requestId": "a", "message": "x"})
        assert (await ws.expect("error"))["code"] == "invalid_field"
        await ws.send({"type": "prompt", "requestId": "b", "sessionId": "s", "message": "  "})
        assert (await ws.expect("error"))["code"] == "invalid_field"


async def test_new_conversation_picks_the_only_live_host(
    gw: RunningGateway, collector: Settings, admin: aioredis.Redis, keys: Keys, workdir: Path
) -> None:
    """Without host, the only live machine reserves the conversation; with two, host is required."""
    async with WsClient(gw.ws, token="full-token") as ws:
        await ws.hello()
        await ws.send({"type": "new_conversation", "requestId": "n1", "cwd": str(workdir)})
        ack = await ws.expect("new_conversation_ack")
        assert ack["ok"] is True and ack["host"] == "testhost" and ack["cwd"] == str(workdir)
        assert ack["requestId"] == "n1" and uuid.UUID(ack["sessionId"])
        await admin.set(keys.host("other"), b"{}", ex=60)
        await admin.zadd(keys.hosts, {"other": int(time.time() * 1000) + 60_000})
        await ws.send({"type": "new_conversation", "requestId": "n2"})
        ack = await ws.expect("new_conversation_ack")
        assert (ack["ok"], ack["errorCode"]) == (False, "host_required")
        await ws.send(
            {"type": "new_conversation", "requestId": "n3", "host": "testhost", "cwd": str(workdir)}
        )
        ack = await ws.expect("new_conversation_ack")
        assert ack["ok"] is True and ack["requestId"] == "n3"


async def test_commands_in_flight_per_connection_are_bounded(
    gw: RunningGateway, admin: aioredis.Redis, keys: Keys, workdir: Path, claude_dir: Path
) -> None:
    """A connection with 16 commands waiting gets error{unavailable} for the next one at once."""
    sid = await _session(admin, keys, workdir, claude_dir, "mute")
    await admin.set(keys.host("mute"), b"{}", ex=60)
    async with WsClient(gw.ws, token="full-token") as ws:
        await ws.hello()
        for i in range(17):
            await ws.send({"type": "interrupt_request", "requestId": f"i{i}", "sessionId": sid})
        err = await ws.expect("error")
    assert (err["requestId"], err["code"]) == ("i16", "unavailable")

    async def queued() -> bool:
        return await admin.xlen(keys.cmd("mute")) == 16

    assert await wait_for(queued, what="16 routed commands")
